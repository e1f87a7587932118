"""The variant language: masks and score mods as expressions, and everything derived from one.

An expression reads the INT names `b` (batch), `h` (query head), `q_idx`, `kv_idx`, `sq`, `sk` (seqlen_q,
seqlen_k), the FLOAT `score` (score mods only), declared runtime tensors `t[i, j]` (one INT index per
declared dim, clamped into the tensor's shape when read) and declared scalars. It is built from int and
float literals, True/False, `+ - * / // % **`, unary `-`/`+`, comparisons `< <= > >= == !=` (chains
allowed), `and or not`, `x if c else y`, `min(a, b, ...)`, `max(...)`, `abs exp log tanh sigmoid sqrt
floor`. Semantics are Python's (`//` and `%` floor, `/` and `**` give FLOAT, `floor` gives INT); bools
are not numbers. A mask is BOOL; a score mod is FLOAT or INT (used as a float).

From one parsed tree (`parse`, text is never evaluated):
  canonical   one text per tree (cache keys, kernel names)
  evaluate    the float64 NumPy reference
  bounds, classify   interval arithmetic: the tile classifier (empty / partial / full)
  derivative, simplify   d/d score (the backward)
  emit, emit_classify, emit_bounds   CUDA C++ (with templates/features/expr_prelude.cuh)
"""

from .canonical import canonical
from .cxx import emit
from .cxx_bounds import emit_bounds, emit_classify
from .decls import SHAPE_DIMS, ScalarDecl, TensorDecl
from .derive import derivative
from .errors import ExprError
from .interval import BoolBounds, Interval, TileClass, bounds, classify, tensor_bounds_from_arrays
from .nodes import (
    Binary,
    BoolOp,
    Call,
    Compare,
    Const,
    Expr,
    IfExp,
    Not,
    TensorRef,
    Ty,
    Unary,
    Var,
    depends_on,
    free_names,
    indexed_by_range,
    tensors_used,
    uses_score,
)
from .numpy_eval import evaluate
from .parse import parse
from .simplify import simplify

__all__ = [
    "SHAPE_DIMS", "Binary", "BoolBounds", "BoolOp", "Call", "Compare", "Const", "Expr", "ExprError", "IfExp",
    "Interval", "Not", "ScalarDecl", "TensorDecl", "TensorRef", "TileClass", "Ty", "Unary", "Var", "bounds",
    "canonical", "classify", "depends_on", "derivative", "emit", "emit_bounds", "emit_classify", "evaluate",
    "free_names", "indexed_by_range", "parse", "simplify", "tensor_bounds_from_arrays", "tensors_used",
    "uses_score",
]
