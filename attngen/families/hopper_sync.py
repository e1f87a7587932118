"""How the Hopper kernels wait for an mbarrier phase (templates/common/hopper_ptx.cuh.j2's mbar_wait)."""

from __future__ import annotations

#: mbarrier.try_wait's suspend-time hint in nanoseconds (0: no hint). Without one, try_wait gives up after a short
#: system-dependent time and the wait loop spins: in the hd128 forward (H100, ncu, results/h100/mbar_suspend/) the
#: producer's wait for a free V stage looped 22M times, 9% of the kernel's instructions, on the SM sub-partition
#: of a consumer warp. With the hint, ptxas puts a NANOSLEEP.SYNCS in the retry path: the thread sleeps until the
#: phase completes or the hint's time passes (CUTLASS's barriers pass the same 10 ms).
MBARRIER_SUSPEND_NS = 10_000_000


def sync_context() -> dict[str, int]:
    """The template values of the mbarrier waits."""
    return {"mbar_suspend_ns": MBARRIER_SUSPEND_NS}
