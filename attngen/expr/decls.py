"""What an expression may read besides its built-in names: declared runtime tensors and scalars."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ExprError
from .nodes import Ty

#: The built-in names of every expression (all INT) and the score mod's `score` (FLOAT).
INDEX_NAMES: tuple[str, ...] = ("b", "h", "q_idx", "kv_idx", "sq", "sk")
SCORE = "score"
#: Callable functions: name -> (fewest, most) arguments; None: no upper bound.
FUNCTIONS: dict[str, tuple[int, int | None]] = {
    "min": (2, None), "max": (2, None), "abs": (1, 1), "exp": (1, 1), "log": (1, 1), "tanh": (1, 1),
    "sigmoid": (1, 1), "sqrt": (1, 1), "floor": (1, 1),
}
#: Names a declaration may not take.
RESERVED: frozenset[str] = frozenset({*INDEX_NAMES, SCORE, *FUNCTIONS, "True", "False", "None"})
#: Symbolic tensor dims: each is a size of the call.
SHAPE_DIMS: tuple[str, ...] = ("batch", "heads", "kv_heads", "seqlen_q", "seqlen_k")
#: Element type of each tensor dtype and of each scalar dtype.
TENSOR_DTYPES: dict[str, Ty] = {"int32": Ty.INT, "fp32": Ty.FLOAT, "fp16": Ty.FLOAT, "bf16": Ty.FLOAT}
SCALAR_DTYPES: dict[str, Ty] = {"int32": Ty.INT, "fp32": Ty.FLOAT}
MAX_DIMS = 4


@dataclass(frozen=True)
class TensorDecl:
    """A runtime tensor: `TensorDecl("int32", ("batch", "seqlen_q"))`. Reads are clamped into its shape."""

    dtype: str
    shape: tuple[int | str, ...]

    def __post_init__(self) -> None:
        if self.dtype not in TENSOR_DTYPES:
            raise ExprError(f"tensor dtype {self.dtype!r} is not supported; allowed: {', '.join(TENSOR_DTYPES)}")
        shape = tuple(self.shape) if isinstance(self.shape, (list, tuple)) else None
        if shape is None or not 1 <= len(shape) <= MAX_DIMS:
            raise ExprError(f"tensor shape {self.shape!r} must be a list of 1 to {MAX_DIMS} dims")
        for dim in shape:
            if isinstance(dim, bool) or not isinstance(dim, (int, str)):
                raise ExprError(f"tensor dim {dim!r} must be a positive integer or one of {', '.join(SHAPE_DIMS)}")
            if isinstance(dim, int) and dim < 1:
                raise ExprError(f"tensor dim {dim} must be positive")
            if isinstance(dim, str) and dim not in SHAPE_DIMS:
                raise ExprError(f"tensor dim {dim!r} is not a size attngen knows; allowed: a positive integer or "
                                f"one of {', '.join(SHAPE_DIMS)}")
        object.__setattr__(self, "shape", shape)

    @property
    def ty(self) -> Ty:
        return TENSOR_DTYPES[self.dtype]


@dataclass(frozen=True)
class ScalarDecl:
    """A runtime scalar: `ScalarDecl("fp32")`."""

    dtype: str

    def __post_init__(self) -> None:
        if self.dtype not in SCALAR_DTYPES:
            raise ExprError(f"scalar dtype {self.dtype!r} is not supported; allowed: {', '.join(SCALAR_DTYPES)}")

    @property
    def ty(self) -> Ty:
        return SCALAR_DTYPES[self.dtype]
