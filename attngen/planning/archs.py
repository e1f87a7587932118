"""The budget model of each GPU generation: data, with the reason beside each number.

Figures are the vendor's (CUDA C++ Programming Guide, "Features and Technical Specifications",
and each architecture's tuning guide). Pure functions of this table (each kernel family's smem_layout
and register_estimate, attngen/families/) compute what a plan needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec.model import Arch


@dataclass(frozen=True)
class ArchInfo:
    arch: Arch
    parts: str
    #: NVRTC --gpu-architecture value. "a" targets unlock arch-specific features (wgmma, tcgen05)
    #: and run only on that exact generation.
    nvrtc_target: str
    smem_per_sm: int
    #: Opt-in maximum dynamic shared memory per block (cudaDevAttrMaxSharedMemoryPerBlockOptin).
    smem_per_block: int
    #: Shared memory the driver reserves per resident block (1 KB since sm80).
    smem_reserved_per_block: int
    regs_per_sm: int
    max_regs_per_thread: int
    max_threads_per_sm: int
    num_sms_hint: int
    matrix_path: str
    copy_path: str
    #: Dense fp16/bf16 FLOP per clock per SM through mma.sync (the cost model's matrix rate).
    mma_flops_per_clk: int
    #: Boost clock in GHz (cost model only).
    clock_ghz: float
    #: DRAM bandwidth in GB/s (cost model only).
    hbm_gbps: int
    #: Shared-memory bandwidth per SM per clock: 32 banks x 4 bytes on every generation here.
    smem_bytes_per_clk: int = 128
    #: Registers ptxas needs beyond the planner's estimate on this target. Measured on sm_100a: tilings
    #: sm_90a compiles at 240-255 without spills spill 16 B there (hd128 128 x 64 with 2 warp tiles at
    #: estimate 240; hd192 128 x 64 with Q in registers at estimate 224), so sm100 keeps 48 in reserve.
    extra_registers: int = 0
    #: Dense fp16/bf16 FLOP per clock per SM through wgmma (0: no wgmma). H100 SXM: 989 TFLOP/s /
    #: (132 SMs x 1.83 GHz) = 4096.
    wgmma_flops_per_clk: int = 0
    #: Registers a thread may hold at most after setmaxnreg (a multiple of 8; 0: no setmaxnreg).
    max_setmaxnreg: int = 0


_K = 1024

ARCHS: dict[Arch, ArchInfo] = {
    # A100: 192 KB L1/smem per SM, of which up to 164 KB is carve-out; 163 KB per block opt-in.
    # 312 TFLOP/s / (108 SMs x 1.41 GHz) = 2048 FLOP/clk/SM; HBM2e 2039 GB/s.
    Arch.sm80: ArchInfo(Arch.sm80, "A100, A30", "sm_80", 164 * _K, 166912, _K, 65536, 255, 2048, 108,
                        "mma.sync m16n8k16", "cp.async", 2048, 1.41, 2039),
    # GA10x: 128 KB L1/smem per SM, 100 KB carve-out, 99 KB per block.
    # A10: 125 TFLOP/s / (72 x 1.695 GHz) ~ 1024 FLOP/clk/SM; GDDR6 600 GB/s.
    Arch.sm86: ArchInfo(Arch.sm86, "A10, A40, RTX 30", "sm_86", 100 * _K, 101376, _K, 65536, 255, 1536, 84,
                        "mma.sync m16n8k16", "cp.async", 1024, 1.70, 600),
    # AD10x: same shared-memory geometry as GA10x.
    # L40S: 362 TFLOP/s / (142 x 2.52 GHz) ~ 1024 FLOP/clk/SM; GDDR6 864 GB/s.
    Arch.sm89: ArchInfo(Arch.sm89, "L4, L40, RTX 40", "sm_89", 100 * _K, 101376, _K, 65536, 255, 1536, 58,
                        "mma.sync m16n8k16 (+fp8 m16n8k32)", "cp.async", 1024, 2.52, 864),
    # H100/H200: 256 KB L1/smem per SM, 228 KB carve-out, 227 KB per block.
    # mma.sync reaches about 2/3 of wgmma's 4096 FLOP/clk/SM; HBM3 3350 GB/s (3.0 TB/s measured).
    Arch.sm90: ArchInfo(Arch.sm90, "H100, H200", "sm_90a", 228 * _K, 232448, _K, 65536, 255, 2048, 132,
                        "wgmma (sm_90a), mma.sync", "TMA, cp.async", 2730, 1.83, 3000,
                        wgmma_flops_per_clk=4096, max_setmaxnreg=240),
    # B200: same smem geometry as Hopper, plus 256 KB tensor memory.
    # Legacy mma.sync rate assumed Hopper-like; HBM3e 8000 GB/s.
    Arch.sm100: ArchInfo(Arch.sm100, "B200, GB200", "sm_100a", 228 * _K, 232448, _K, 65536, 255, 2048, 148,
                         "tcgen05 (sm_100a), mma.sync", "TMA, cp.async", 2730, 1.85, 8000,
                         extra_registers=48),
    # RTX 50: consumer Blackwell, GA10x-sized shared memory.
    # RTX 5090: ~1024 FLOP/clk/SM at fp32 accumulation; GDDR7 1792 GB/s.
    Arch.sm120: ArchInfo(Arch.sm120, "RTX 50", "sm_120", 100 * _K, 101376, _K, 65536, 255, 1536, 170,
                         "mma.sync m16n8k16", "TMA, cp.async", 1024, 2.41, 1792),
}


def arch_info(arch: Arch) -> ArchInfo:
    return ARCHS[arch]
