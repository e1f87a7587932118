"""How the Hopper kernels wait for an mbarrier phase (templates/common/hopper_ptx.cuh.j2's mbar_wait)."""

from __future__ import annotations

#: mbarrier.try_wait's suspend-time hint in nanoseconds (0: no hint). Without one, try_wait gives up after a short
#: system-dependent time and the wait loop spins: in the hd128 forward (H100, ncu, results/h100/mbar_suspend/) the
#: producer's wait for a free V stage looped 22M times, 9% of the kernel's instructions. With a hint ptxas puts a
#: NANOSLEEP.SYNCS in the retry path (CUTLASS's barriers pass 10 ms, as FlashAttention-4's do). Measured with
#: 10_000_000 against none, alternately in one process (mbar_suspend/fwd_ab.txt, bwd_ab.txt): forward +0.0-0.9% at
#: hd128, level at hd64 and hd256; backward 0.3-0.6% slower at hd128, level at hd64. The spinning costs no speed, so
#: no hint by default.
MBARRIER_SUSPEND_NS = 0


def sync_context() -> dict[str, int]:
    """The template values of the mbarrier waits."""
    return {"mbar_suspend_ns": MBARRIER_SUSPEND_NS}
