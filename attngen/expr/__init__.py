"""The variant language (draft)."""
from .canonical import canonical
from .decls import ScalarDecl, TensorDecl
from .errors import ExprError
from .interval import BoolBounds, Interval, TileClass, bounds, classify
from .nodes import Ty, depends_on, free_names, indexed_by_range, tensors_used, uses_score
from .numpy_eval import evaluate
from .parse import parse

__all__ = ["BoolBounds", "ExprError", "Interval", "ScalarDecl", "TensorDecl", "TileClass", "Ty", "bounds",
           "canonical", "classify", "depends_on", "evaluate", "free_names", "indexed_by_range", "parse",
           "tensors_used", "uses_score"]
