"""The one table from attngen's enums to C++/PTX spellings (as CUTLASS's DataTypeTag)."""

from __future__ import annotations

from dataclasses import dataclass

from ..spec.model import DType


@dataclass(frozen=True)
class DTypeTag:
    name: str
    #: 16-bit storage type in the generated code (the kernels include no CUDA headers).
    storage: str
    #: PTX type of mma.sync operands.
    mma: str
    #: PTX instruction packing two f32 into one register of two 16-bit values.
    cvt_pack: str
    #: torch dtype name of the op's tensors.
    torch: str


DTYPE_TAGS: dict[DType, DTypeTag] = {
    DType.fp16: DTypeTag("fp16", "unsigned short", "f16", "cvt.rn.f16x2.f32", "float16"),
    DType.bf16: DTypeTag("bf16", "unsigned short", "bf16", "cvt.rn.bf16x2.f32", "bfloat16"),
}
