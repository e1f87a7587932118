"""The host side of the kernels' own checks (runtime.device_checks): counters read without a sync, each growth
reported once as DeviceCheckError naming the argument, and the switches that put the checks on the host."""

from __future__ import annotations

import ctypes

import pytest

from attngen import env
from attngen.errors import DeviceCheckError
from attngen.runtime import device_checks
from attngen.runtime.device_checks import KINDS, Counters


def _counters() -> tuple[Counters, ctypes.Array]:   # type: ignore[type-arg]
    words = (ctypes.c_uint32 * len(KINDS))()
    address = ctypes.addressof(words)
    return Counters(host=address, device=address), words


def test_nothing_counted_raises_nothing() -> None:
    counters, _ = _counters()
    counters.raise_new("cuda:0")
    assert counters.reported == [0, 0]


def test_a_growth_is_reported_once_with_its_argument_and_count() -> None:
    counters, words = _counters()
    words[0] = 3
    with pytest.raises(DeviceCheckError, match=r"cache_seqlens: a length outside \[0, the cache's rows\].*met by 3 "
                                               r"thread blocks") as info:
        counters.raise_new("cuda:1")
    assert "cuda:1" in str(info.value) and "block_table" not in str(info.value)
    assert isinstance(info.value, ValueError)
    counters.raise_new("cuda:1")   # reported: quiet until the count grows again
    words[0], words[1] = 4, 1
    with pytest.raises(DeviceCheckError, match=r"met by 1 thread block\b.*block_table: .*met by 1 thread block"):
        counters.raise_new("cuda:1")
    counters.raise_new("cuda:1")


def test_a_counter_that_wraps_still_reports() -> None:
    counters, words = _counters()
    counters.reported = [2**32 - 1, 0]
    words[0] = 1
    with pytest.raises(DeviceCheckError, match="met by 2 thread blocks"):
        counters.raise_new("cuda:0")


def test_the_host_never_writes_the_counters() -> None:
    counters, words = _counters()
    words[1] = 7
    with pytest.raises(DeviceCheckError):
        counters.raise_new("cuda:0")
    assert list(words) == [0, 7]


def test_a_device_without_counters_has_nothing_pending() -> None:
    device_checks.raise_pending(63)
    assert 63 not in device_checks._COUNTERS


def test_the_error_names_its_remedies() -> None:
    counters, words = _counters()
    words[1] = 1
    with pytest.raises(DeviceCheckError, match="ATTNGEN_HOST_CHECKS=1.*attngen.check_device_errors"):
        counters.raise_new("cuda:0")


@pytest.mark.parametrize(("value", "on"), [(None, False), ("", False), ("0", False), ("1", True)])
def test_host_checks_switch(monkeypatch: pytest.MonkeyPatch, value: str | None, on: bool) -> None:
    if value is None:
        monkeypatch.delenv("ATTNGEN_HOST_CHECKS", raising=False)
    else:
        monkeypatch.setenv("ATTNGEN_HOST_CHECKS", value)
    assert env.host_checks() is on


def test_public_names() -> None:
    import attngen

    assert attngen.DeviceCheckError is DeviceCheckError
    assert attngen.check_device_errors is device_checks.check_device_errors
