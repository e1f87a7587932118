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
    #: PTX instruction packing two f32 into one 32-bit register of two elements (16 bits for an 8-bit type).
    cvt_pack: str
    #: torch dtype name of the op's tensors (`getattr(torch, trait.torch)`).
    torch: str
    #: Bytes per element, in global and shared memory.
    size: int
    #: The k of one MMA instruction on this type: 16 for 16-bit types (mma.sync m16n8k16, wgmma k16).
    mma_k: int
    #: The CUtensorMapDataType member the TMA maps of this type's tiles are encoded with.
    tma: str
    #: The spec dtype name of the output (and of the staged O tile): the type itself for 16-bit types, bf16 for
    #: fp8 (FA3's fp8 forward returns bf16).
    out: str = ""
    #: Whether calls take fp32 descale factors q_descale, k_descale, v_descale (per-tensor scales of 8-bit inputs).
    descaled: bool = False
    #: Arches whose tensor cores run mma.sync on this type natively (None: every arch). fp8: sm89 and sm120 (QMMA).
    #: ptxas for sm_90a and sm_100a emulates mma.sync e4m3 (F2FP to f16, two HMMA each; SASS checked with NVRTC
    #: 13.5) and spills at hd256: sm90 runs fp8 on wgmma instead (sm90_fwd); sm100 waits for a tcgen05 path.
    mma_sync_archs: tuple[str, ...] | None = None
    #: Row bytes a shared-memory tile must be a multiple of (the 64-byte swizzle group; hd96 fp8 rows are 96 B).
    row_multiple: int = 0
    #: Row bytes the Hopper (wgmma) kernels need a head dim's rows to be a multiple of, beyond the 16-bit types' 64
    #: columns: 0 for none. fp8: 128, one whole 128-byte swizzle row per TMA box (hd128 and hd256); wgmma's 8-bit
    #: operands are K-major only, so V is transposed into 128-key boxes whose rows are 128 bytes as well.
    wgmma_row_bytes: int = 0
    #: Whether backward kernels exist for this type (the gradient and decode families serve only such types).
    backward: bool = True

    @property
    def wgmma_v_box_keys(self) -> int:
        """Keys per TMA box of V on the wgmma path, 0 where V is used as stored. wgmma takes 8-bit B operands
        K-major only, so O += P V reads V transposed, (batch, kv_heads, head_dim, keys), in boxes of one 128-byte
        swizzle row of keys (runtime/fp8_layout.py builds it per call)."""
        return self.wgmma_row_bytes // self.size

    @property
    def out_name(self) -> str:
        """The output's spec dtype name (`out`, or the type itself)."""
        return self.out or self.name


#: The trait of each element type. TMA moves 16-bit tiles as UINT16, 8-bit as UINT8: a copy does not convert.
DTYPES: dict[DType, DTypeTrait] = {
    DType.fp16: DTypeTrait(name="fp16", storage="unsigned short", mma="f16", cvt_pack="cvt.rn.f16x2.f32",
                           torch="float16", size=2, mma_k=16, tma="CU_TENSOR_MAP_DATA_TYPE_UINT16"),
    DType.bf16: DTypeTrait(name="bf16", storage="unsigned short", mma="bf16", cvt_pack="cvt.rn.bf16x2.f32",
                           torch="bfloat16", size=2, mma_k=16, tma="CU_TENSOR_MAP_DATA_TYPE_UINT16"),
    # mma.sync m16n8k32 e4m3 (sm89+); P is packed to e4m3 (saturating) for P V; the output is bf16.
    DType.fp8_e4m3: DTypeTrait(name="fp8_e4m3", storage="unsigned char", mma="e4m3",
                               cvt_pack="cvt.rn.satfinite.e4m3x2.f32",
                               torch="float8_e4m3fn", size=1, mma_k=32, tma="CU_TENSOR_MAP_DATA_TYPE_UINT8",
                               out="bf16", descaled=True, mma_sync_archs=("sm89", "sm120"), backward=False,
                               row_multiple=64, wgmma_row_bytes=128),
}


def out_trait(trait: DTypeTrait) -> DTypeTrait:
    """The trait of `trait`'s output type."""
    return next(t for t in DTYPES.values() if t.name == trait.out_name)


def with_backward() -> tuple[str, ...]:
    """Spec names of the element types that have backward (and decode) kernels: what those families serve."""
    return tuple(d.value for d, t in DTYPES.items() if t.backward)


def unscaled() -> tuple[str, ...]:
    """Spec names of the element types whose calls take no descale factors (the 16-bit ones): what families
    without a descale path serve."""
    return tuple(d.value for d, t in DTYPES.items() if not t.descaled)


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
