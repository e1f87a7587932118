"""Budget invariants every KernelPlan must keep, whatever its pipeline."""

from __future__ import annotations

from attngen.families import sm80_fwd, sm90_fwd
from attngen.planning.archs import arch_info
from attngen.planning.ir import KernelPlan
from attngen.spec.model import MAX_STAGES, MIN_STAGES


def assert_within_budget(p: KernelPlan) -> None:
    info = arch_info(p.arch)
    spec, t = p.spec, p.tiling
    assert p.smem_bytes <= info.smem_per_block
    single = p.stages == 1 and sm80_fwd.MEASURED.get((p.arch, spec.head_dim)) == t   # one K/V buffer: measured only
    assert p.block_n % 16 == 0 and (single or MIN_STAGES <= p.stages <= MAX_STAGES)
    assert p.threads == 32 * p.num_warps
    assert p.arch.value in p.kernel_name and f"hd{spec.head_dim}" in p.kernel_name
    assert p.pipeline.value in p.kernel_name
    if p.family == "sm90_fwd":
        assert p.roles is not None and p.pipeline.is_hopper and p.arch.value == "sm90"
        assert p.smem_bytes == sm90_fwd.smem_layout(spec, t).total_bytes == p.smem.total_bytes
        assert p.regs_estimate == sm90_fwd.register_estimate(spec, t) <= p.roles.consumer_regs
        assert p.block_m == 64 * p.roles.consumer_warpgroups and p.num_warps == 4 * (p.roles.consumer_warpgroups + 1)
        # The register split fits the register file: producer warpgroup + consumers.
        assert 128 * (p.roles.producer_regs + p.roles.consumer_warpgroups * p.roles.consumer_regs) <= info.regs_per_sm
        assert p.roles.consumer_regs % 8 == 0 and p.roles.producer_regs % 8 == 0
        assert t.intra_wg_overlap == p.roles.intra_wg_overlap
        assert spec.head_dim % 64 == 0
    else:
        assert p.family == "sm80_fwd" and p.roles is None and not p.pipeline.is_hopper
        assert p.smem_bytes == sm80_fwd.smem_layout(spec, t).total_bytes == p.smem.total_bytes
        assert p.regs_estimate == sm80_fwd.register_estimate(spec, t, info) <= info.max_regs_per_thread
        assert p.block_m == 16 * t.warp_m_tiles * p.num_warps
        assert p.cost.blocks_per_sm >= 1
