"""Facts more than one kernel family plans with, defined once, with the reason beside each number.

A family's own constants (its search space, its register overheads, its measured tiles) stay in its
module under attngen/families/; what lives here is what two or more of them share: the reference
workload the cost models rank on, limits of the toolchain and of the hardware, and the names kernels
get.
"""

from __future__ import annotations

from ..features.variant import variant_of
from ..spec.model import Arch, AttentionSpec, PipelineKind
from .archs import ArchInfo

#: The workload the cost models rank candidates on (FlashAttention-3 paper settings, mid-size):
#: sequence length, and batch x heads x head_dim filling this hidden size.
REF_SEQLEN = 4096
REF_HIDDEN = 2048
#: Backward FLOPs over the forward's: five products of the forward's two sizes (S = Q K^T recomputed, dP = dO V^T,
#: dV = P^T dO, dK = dS^T Q, dQ = dS K) against two. FlashAttention's papers and the bench (bench.backward) count
#: the backward so; recomputation beyond S (a head-dim slice's, say) is not useful work and not counted.
BWD_FLOPS_OVER_FWD = 2.5


def ref_forward_flops(spec: AttentionSpec) -> float:
    """The forward's FLOPs at the reference workload: 4 x seqlen^2 x head_dim per head, times the share of
    scores the mask keeps (mask_trait.cost_density: 0.5 causal), as the forward cost models count them."""
    from ..features.mask import mask_trait

    heads = REF_HIDDEN // spec.head_dim
    return heads * 4 * REF_SEQLEN * REF_SEQLEN * spec.head_dim * mask_trait(spec).cost_density


def resident_blocks(info: ArchInfo, smem: int, regs: int, threads: int) -> int:
    """Blocks of one kernel resident per SM: the least of what shared memory (with the driver's reserve per block),
    registers (at least 32 a thread: the allocation's floor) and threads allow."""
    by_smem = info.smem_per_sm // (smem + info.smem_reserved_per_block)
    by_regs = info.regs_per_sm // (max(regs, 32) * threads)
    return max(0, min(by_smem, by_regs, info.max_threads_per_sm // threads))


#: exp2 per clock per SM: the special-function (MUFU) units, 4 per SM sub-partition, 16 per SM on sm80 through sm90.
#: The forward families charge one per score; the mma.sync kernels' softmax and the wgmma kernels' softmax both run on
#: them (the FlashAttention-3 paper, section 3: 3.9 TFLOP/s of exp against 989 of matmul on the H100).
MUFU_PER_CLK = 16
#: Fixed cost of one loop iteration of an mma.sync kernel (cp.async wait, barrier, loop and softmax
#: bookkeeping), in clocks; another resident block overlaps it. 512 makes the forward's model rank
#: hd256 block_n 64 over 32 as the H100 sweep measured (294 vs 270 TFLOP/s; benchmarks/NOTES.md).
ITER_OVERHEAD_CLK = 512
#: cp.async copies one thread issues per tile. Past 16, ptxas keeps too many addresses live and
#: spills (hd256, block_n 128, 4 warps: 344 B of spills at 255 registers; with 8 warps, 16 copies
#: each, none).
MAX_COPIES_PER_THREAD = 16
#: Bytes one cp.async copy moves (its 16-byte form, the widest).
CP_ASYNC_BYTES = 16
#: Shared memory kept free to align TMA tiles to 1024 bytes (128-byte swizzle atoms) whatever address
#: the dynamic shared memory starts at.
ALIGN_SLACK = 1024
#: Words of the live-tile bitmap a warp-specialized kernel keeps in shared memory for a mask with holes (a
#: general expression may leave empty tiles between live ones): the block writes it while it finds its range,
#: and the producer thread steps over empty tiles by it instead of running the classifier within setmaxnreg's
#: 24 registers (the document mask spilled 300 B there). 128 words hold 4096 tiles (512k keys in 128-key
#: blocks); tiles past them are visited under the element mask.
SCHEDULE_WORDS = 128


def schedule_words(spec: AttentionSpec) -> int:
    """The live-tile bitmap's words a warp-specialized kernel of this spec keeps (0: its mask has no holes)."""
    from ..features.mask import mask_trait

    return 0 if mask_trait(spec).contiguous else SCHEDULE_WORDS


#: Registers of a producer warpgroup after setmaxnreg.dec: it only computes copy coordinates.
PRODUCER_REGS = 24


#: Bytes of the widest swizzle row (8 chunks of 16 bytes); rows of other tiles are half that.
SWIZZLE_ROW_BYTES = 128


def swizzle_chunks(head_dim: int, elem_bytes: int) -> int:
    """16-byte chunks per swizzle row: 8 (128-byte rows) when a row of the tile fills whole 128-byte rows,
    else 4 (64-byte rows)."""
    return 8 if head_dim * elem_bytes % SWIZZLE_ROW_BYTES == 0 else 4


def kernel_name(spec: AttentionSpec, arch: Arch, pipeline: PipelineKind, direction: str = "fwd") -> str:
    """attn_<direction>_<variant>_hd<d>_<dtype>_<arch>_<pipeline>; the variant is the mask's part, then the
    score mod's and sinks' when there are any (`causal`, `window_4096_0_softcap50`)."""
    mask = variant_of(spec).name_part
    varlen = "_varlen" if spec.seqlens.value == "varlen" else ""
    return f"attn_{direction}_{mask}_hd{spec.head_dim}_{spec.dtype.value}_{arch.value}_{pipeline.value}{varlen}"


def setmaxnreg_split(info: ArchInfo, consumer_wgs: int) -> tuple[int, int]:
    """(producer, consumer) registers per thread of a warp-specialized block: what the producer
    warpgroup gives up (down to PRODUCER_REGS) is shared by the consumers, in multiples of 8, up to
    setmaxnreg's maximum. The pool is what the launch allocated (the registers per thread a block of this many
    threads gets, a multiple of 8, times its threads), not the whole register file: setmaxnreg.inc past the pool
    waits forever (384 threads get 168 each, 64512 of 65536)."""
    threads = 128 * (1 + consumer_wgs)
    total = info.regs_per_sm // threads // 8 * 8 * threads - 128 * PRODUCER_REGS
    return PRODUCER_REGS, min(info.max_setmaxnreg, total // (128 * consumer_wgs) // 8 * 8)
