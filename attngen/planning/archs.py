"""The budget model of each GPU generation: data, with the reason beside each number.

Figures are the vendor's (CUDA C++ Programming Guide, "Features and Technical Specifications",
and each architecture's tuning guide). Pure functions of this table (each kernel family's smem_layout
and register_estimate, attngen/families/) compute what a plan needs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..spec.model import Arch

_K = 1024


@dataclass(frozen=True, kw_only=True)
class ArchInfo:
    """One GPU generation's budget and rates. Rows name every field (no positional rows)."""

    arch: Arch
    #: The parts of the generation, as explain names them.
    parts: str
    #: NVRTC --gpu-architecture value. "a" targets unlock arch-specific features (wgmma, tcgen05)
    #: and run only on that exact generation.
    nvrtc_target: str
    #: What the generation offers for matrix products and for copies into shared memory (explain's header).
    matrix_path: str
    copy_path: str
    #: L1/shared-memory carve-out per SM.
    smem_per_sm: int
    #: Opt-in maximum dynamic shared memory per block (cudaDevAttrMaxSharedMemoryPerBlockOptin).
    smem_per_block: int
    #: Shared memory the driver reserves per resident block (1 KB since sm80).
    smem_reserved_per_block: int = _K
    #: 64K 32-bit registers per SM on every generation here.
    regs_per_sm: int = 65536
    #: The ISA's limit per thread.
    max_regs_per_thread: int = 255
    max_threads_per_sm: int
    #: SMs of the generation's flagship part (cost model only: waves and tile efficiency).
    num_sms_hint: int
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
    #: Programmatic dependent launch (griddepcontrol, sm90 on): a kernel starts while the one it depends on
    #: still runs and waits for its results in the kernel, which hides the second launch's latency.
    programmatic_launch: bool = False


ARCHS: dict[Arch, ArchInfo] = {
    # A100: 192 KB L1/smem per SM, of which up to 164 KB is carve-out; 163 KB per block opt-in.
    # 312 TFLOP/s / (108 SMs x 1.41 GHz) = 2048 FLOP/clk/SM; HBM2e 2039 GB/s.
    Arch.sm80: ArchInfo(arch=Arch.sm80, parts="A100, A30", nvrtc_target="sm_80", matrix_path="mma.sync m16n8k16",
                        copy_path="cp.async", smem_per_sm=164 * _K, smem_per_block=166912, max_threads_per_sm=2048,
                        num_sms_hint=108, mma_flops_per_clk=2048, clock_ghz=1.41, hbm_gbps=2039),
    # GA10x: 128 KB L1/smem per SM, 100 KB carve-out, 99 KB per block.
    # A10: 125 TFLOP/s / (72 x 1.695 GHz) ~ 1024 FLOP/clk/SM; GDDR6 600 GB/s.
    Arch.sm86: ArchInfo(arch=Arch.sm86, parts="A10, A40, RTX 30", nvrtc_target="sm_86",
                        matrix_path="mma.sync m16n8k16", copy_path="cp.async", smem_per_sm=100 * _K,
                        smem_per_block=101376, max_threads_per_sm=1536, num_sms_hint=84, mma_flops_per_clk=1024,
                        clock_ghz=1.70, hbm_gbps=600),
    # AD10x: same shared-memory geometry as GA10x.
    # L40S: 362 TFLOP/s / (142 x 2.52 GHz) ~ 1024 FLOP/clk/SM; GDDR6 864 GB/s.
    Arch.sm89: ArchInfo(arch=Arch.sm89, parts="L4, L40, RTX 40", nvrtc_target="sm_89",
                        matrix_path="mma.sync m16n8k16 (+fp8 m16n8k32)", copy_path="cp.async", smem_per_sm=100 * _K,
                        smem_per_block=101376, max_threads_per_sm=1536, num_sms_hint=58, mma_flops_per_clk=1024,
                        clock_ghz=2.52, hbm_gbps=864),
    # H100/H200: 256 KB L1/smem per SM, 228 KB carve-out, 227 KB per block.
    # mma.sync reaches about 2/3 of wgmma's 4096 FLOP/clk/SM; HBM3 3350 GB/s (3.0 TB/s measured).
    Arch.sm90: ArchInfo(arch=Arch.sm90, parts="H100, H200", nvrtc_target="sm_90a",
                        matrix_path="wgmma (sm_90a), mma.sync", copy_path="TMA, cp.async", smem_per_sm=228 * _K,
                        smem_per_block=232448, max_threads_per_sm=2048, num_sms_hint=132, mma_flops_per_clk=2730,
                        clock_ghz=1.83, hbm_gbps=3000, wgmma_flops_per_clk=4096, max_setmaxnreg=240,
                        programmatic_launch=True),
    # B200: same smem geometry as Hopper, plus 256 KB tensor memory.
    # Legacy mma.sync rate assumed Hopper-like; HBM3e 8000 GB/s.
    Arch.sm100: ArchInfo(arch=Arch.sm100, parts="B200, GB200", nvrtc_target="sm_100a",
                         matrix_path="tcgen05 (sm_100a), mma.sync", copy_path="TMA, cp.async", smem_per_sm=228 * _K,
                         smem_per_block=232448, max_threads_per_sm=2048, num_sms_hint=148, mma_flops_per_clk=2730,
                         clock_ghz=1.85, hbm_gbps=8000, extra_registers=48, programmatic_launch=True),
    # RTX 50: consumer Blackwell, GA10x-sized shared memory.
    # RTX 5090: ~1024 FLOP/clk/SM at fp32 accumulation; GDDR7 1792 GB/s.
    Arch.sm120: ArchInfo(arch=Arch.sm120, parts="RTX 50", nvrtc_target="sm_120", matrix_path="mma.sync m16n8k16",
                         copy_path="TMA, cp.async", smem_per_sm=100 * _K, smem_per_block=101376,
                         max_threads_per_sm=1536, num_sms_hint=170, mma_flops_per_clk=1024, clock_ghz=2.41,
                         hbm_gbps=1792, programmatic_launch=True),
}


def arch_info(arch: Arch) -> ArchInfo:
    return ARCHS[arch]


@dataclass(frozen=True, kw_only=True)
class MatmulCeiling:
    """The dense matmul rate of one GPU generation that a predicted throughput is held against, for 16-bit (fp16/bf16)
    or 8-bit (e4m3) operands: measured where the project has measured it, else the vendor's datasheet figure (and it
    says so)."""

    arch: Arch
    #: The part the figure is of.
    part: str
    #: Dense FLOP/s of its operands (fp32 accumulation, no sparsity).
    flops_per_s: float
    #: True: timed on our GPU; False: the vendor's figure, not measured here.
    measured: bool
    #: Where the number comes from.
    source: str
    #: Operand width: 16 (fp16/bf16) or 8 (e4m3).
    bits: int = 16

    @property
    def tflops(self) -> float:
        return self.flops_per_s / 1e12

    @property
    def kind(self) -> str:
        """'measured' or 'vendor': how explain names the ceiling."""
        return "measured" if self.measured else "vendor"


MATMUL_CEILINGS: dict[Arch, MatmulCeiling] = {
    Arch.sm80: MatmulCeiling(arch=Arch.sm80, part="A100 SXM", flops_per_s=312e12, measured=False,
                             source="vendor: A100 datasheet, bf16 dense tensor core 312 TFLOP/s; not measured here"),
    Arch.sm86: MatmulCeiling(arch=Arch.sm86, part="A10", flops_per_s=125e12, measured=False,
                             source="vendor: A10 datasheet, bf16 dense tensor core 125 TFLOP/s; not measured here"),
    Arch.sm89: MatmulCeiling(arch=Arch.sm89, part="L40S", flops_per_s=362e12, measured=False,
                             source="vendor: L40S datasheet, bf16 dense tensor core 362 TFLOP/s; not measured here"),
    # The bench's ceiling (measure.ceilings: torch.matmul of two 8192 x 8192 bf16 matrices, median time) in the 7
    # committed bf16 runs on the project's H100 80GB HBM3 (SXM): 736-802 TFLOP/s, median 762
    # (benchmarks/results/h100/**/bench.json "ceilings"); the vendor's dense figure is 989.
    Arch.sm90: MatmulCeiling(arch=Arch.sm90, part="H100 SXM", flops_per_s=760e12, measured=True,
                             source="measured: bf16 8192^3 torch.matmul on our H100 80GB HBM3, 736-802 TFLOP/s in 7 "
                                    "bench runs, median 762 (benchmarks/results/h100/**/bench.json ceilings)"),
    Arch.sm100: MatmulCeiling(arch=Arch.sm100, part="B200", flops_per_s=2250e12, measured=False,
                              source="vendor: B200 (HGX) datasheet, bf16 dense tensor core 2.25 PFLOP/s; not "
                                     "measured here"),
    # The archs table's matrix rate (1024 FLOP/clk/SM x 170 SMs x 2.41 GHz) is the same figure.
    Arch.sm120: MatmulCeiling(arch=Arch.sm120, part="RTX 5090", flops_per_s=419e12, measured=False,
                              source="vendor: RTX 5090 (Blackwell GeForce whitepaper), fp16/bf16 dense tensor 419 "
                                     "TFLOP/s; not measured here"),
}


#: The 8-bit (e4m3) ceilings, where the generation has 8-bit tensor cores and a figure is recorded; others fall back to
#: their 16-bit one (matmul_ceiling says so).
MATMUL_CEILINGS_8BIT: dict[Arch, MatmulCeiling] = {
    Arch.sm89: MatmulCeiling(arch=Arch.sm89, part="L40S", flops_per_s=733e12, measured=False, bits=8,
                             source="vendor: L40S datasheet, fp8 dense tensor core 733 TFLOP/s; not measured here"),
    # benchmarks/fp8_matmul_ceiling.py: torch._scaled_mm of two 8192 x 8192 e4m3 matrices (bf16 out), 7 rounds in one
    # process (benchmarks/results/h100/fp8_ceiling/); the vendor's dense figure is 1979.
    Arch.sm90: MatmulCeiling(arch=Arch.sm90, part="H100 SXM", flops_per_s=1249e12, measured=True, bits=8,
                             source="measured: e4m3 8192^3 torch._scaled_mm on our H100 80GB HBM3, 1214-1349 TFLOP/s "
                                    "in 7 rounds, median 1249 (benchmarks/results/h100/fp8_ceiling)"),
    Arch.sm100: MatmulCeiling(arch=Arch.sm100, part="B200", flops_per_s=4500e12, measured=False, bits=8,
                              source="vendor: B200 (HGX) datasheet, fp8 dense tensor core 4.5 PFLOP/s; not measured "
                                     "here"),
}


def matmul_ceiling(arch: Arch, bits: int = 16) -> MatmulCeiling:
    """The ceiling of `arch` for operands of `bits` bits; an 8-bit one not recorded falls back to the 16-bit one,
    whose source then says so."""
    if bits == 8:
        if arch in MATMUL_CEILINGS_8BIT:
            return MATMUL_CEILINGS_8BIT[arch]
        wide = MATMUL_CEILINGS[arch]
        return replace(wide, source=f"{wide.kind}: no 8-bit figure recorded for {arch.value}, its 16-bit one "
                                    f"({wide.source})")
    return MATMUL_CEILINGS[arch]
