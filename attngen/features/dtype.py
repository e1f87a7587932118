"""The dtype trait: every fact about an element type, in one table (as CUTLASS's DataTypeTag).

`DTYPES` maps each `DType` to its trait: the spellings the templates write (C++ storage type, PTX mma
operand type, the f32x2 pack instruction), the torch dtype of the op's tensors, and the numbers the
planners and launchers use (bytes per element, the k-width of one MMA instruction, the TMA data type of
its tiles). Nothing else in attngen spells these; a new element type is a row here (and the templates'
conversions it needs).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec.model import DType


@dataclass(frozen=True)
class DTypeTrait:
    #: The spec's name of the type ("bf16").
    name: str
    #: Storage type in the generated code (the kernels include no CUDA headers).
    storage: str
    #: PTX type of mma.sync / wgmma operands.
    mma: str
    #: PTX instruction packing two f32 into one 32-bit register of two elements.
    cvt_pack: str
    #: torch dtype name of the op's tensors (`getattr(torch, trait.torch)`).
    torch: str
    #: Bytes per element, in global and shared memory.
    size: int
    #: The k of one MMA instruction on this type: 16 for 16-bit types (mma.sync m16n8k16, wgmma k16).
    mma_k: int
    #: The CUtensorMapDataType member the TMA maps of this type's tiles are encoded with.
    tma: str


#: The trait of each element type. TMA moves 16-bit tiles as UINT16: a copy does not convert.
DTYPES: dict[DType, DTypeTrait] = {
    DType.fp16: DTypeTrait(name="fp16", storage="unsigned short", mma="f16", cvt_pack="cvt.rn.f16x2.f32",
                           torch="float16", size=2, mma_k=16, tma="CU_TENSOR_MAP_DATA_TYPE_UINT16"),
    DType.bf16: DTypeTrait(name="bf16", storage="unsigned short", mma="bf16", cvt_pack="cvt.rn.bf16x2.f32",
                           torch="bfloat16", size=2, mma_k=16, tma="CU_TENSOR_MAP_DATA_TYPE_UINT16"),
}


def dtype_trait(dtype: DType) -> DTypeTrait:
    """The trait of `dtype`."""
    return DTYPES[dtype]


def trait_of_torch(torch_dtype: object) -> DTypeTrait:
    """The trait whose torch dtype is `torch_dtype` (a torch.dtype or its name); KeyError if none is."""
    name = str(torch_dtype).removeprefix("torch.")
    for trait in DTYPES.values():
        if trait.torch == name:
            return trait
    known = ", ".join(t.torch for t in DTYPES.values())
    raise KeyError(f"no element type of torch dtype {name!r}; attngen's are {known}")
