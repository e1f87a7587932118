"""The arrival counters' pool (attngen/runtime/counters.py) on the CPU: which launches share counters and which
never do, and when a capture gets none."""

from __future__ import annotations

import pytest

from attngen.runtime import counters


class _Buffer:
    """A zeroed device buffer as the pool sees it: an address."""

    made: list[int] = []

    def __init__(self, n: int) -> None:
        self.n = n
        self.address = 0x1000_0000 * (len(self.made) + 1)
        self.made.append(n)

    def data_ptr(self) -> int:
        return self.address


@pytest.fixture
def pool() -> tuple[counters.CounterPool, dict[str, bool]]:
    _Buffer.made = []
    state = {"capturing": False}
    return counters.CounterPool(zeros=_Buffer, capturing=lambda: state["capturing"]), state


def test_eager_launches_share_their_streams_counters(pool: tuple[counters.CounterPool, dict[str, bool]]) -> None:
    counters_pool, _ = pool
    a = counters_pool.counters(stream=1, n=8)
    assert counters_pool.counters(stream=1, n=8) == a and counters_pool.counters(stream=1, n=3) == a
    b = counters_pool.counters(stream=2, n=8)
    assert b not in range(a, a + 4 * 8) and a not in range(b, b + 4 * 8)
    # A call that needs more gets a larger slice of its own; the stream keeps it.
    c = counters_pool.counters(stream=1, n=100)
    assert c not in (a, b) and counters_pool.counters(stream=1, n=8) == c
    assert _Buffer.made == [counters.SLAB_COUNTERS]


def test_captures_get_counters_no_other_launch_gets(pool: tuple[counters.CounterPool, dict[str, bool]]) -> None:
    counters_pool, state = pool
    eager = counters_pool.counters(stream=1, n=16)
    state["capturing"] = True
    taken = [counters_pool.counters(stream=1, n=16) for _ in range(3)]
    assert len({eager, *taken}) == 4
    starts = sorted([eager, *taken])
    assert all(b - a >= 16 * 4 for a, b in zip(starts, starts[1:], strict=False))
    state["capturing"] = False
    assert counters_pool.counters(stream=1, n=16) == eager


def test_a_capture_without_zeroed_counters_gets_none(pool: tuple[counters.CounterPool, dict[str, bool]]) -> None:
    counters_pool, state = pool
    state["capturing"] = True
    assert counters_pool.counters(stream=1, n=4) == 0      # no slab yet: none can be zeroed inside a capture
    assert _Buffer.made == []
    state["capturing"] = False
    counters_pool.counters(stream=1, n=4)
    state["capturing"] = True
    left = counters_pool.slabs[-1].size - counters_pool.slabs[-1].used
    assert counters_pool.counters(stream=1, n=left) != 0
    assert counters_pool.counters(stream=1, n=1) == 0


def test_eager_calls_keep_room_for_captures(pool: tuple[counters.CounterPool, dict[str, bool]]) -> None:
    """An eager call zeroes a new slab once the newest would keep fewer than CAPTURE_RESERVE counters free,
    and one call larger than a slab gets a slab of its size."""
    counters_pool, _ = pool
    big = counters.SLAB_COUNTERS - counters.CAPTURE_RESERVE
    counters_pool.counters(stream=1, n=big)
    assert len(_Buffer.made) == 1
    counters_pool.counters(stream=2, n=1)
    assert _Buffer.made == [counters.SLAB_COUNTERS, counters.SLAB_COUNTERS]
    counters_pool.counters(stream=3, n=4 * counters.SLAB_COUNTERS)
    assert _Buffer.made[-1] == 4 * counters.SLAB_COUNTERS + counters.CAPTURE_RESERVE
