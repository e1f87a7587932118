"""TMA tensor-map keys: what the launcher hands cuTensorMapEncodeTiled for each tensor (no GPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from attngen.errors import LaunchError  # noqa: E402
from attngen.runtime.tma import describable, map_key  # noqa: E402


def test_key_of_a_contiguous_tensor() -> None:
    t = torch.empty(2, 1000, 8, 128, dtype=torch.bfloat16)
    key = map_key(t, 128)
    assert key.dims == (128, 1000, 8, 2)
    assert key.strides == (8 * 128 * 2, 128 * 2, 1000 * 8 * 128 * 2)  # seqlen, heads, batch; bytes
    assert (key.box_rows, key.box_cols, key.fp32) == (128, 64, False)


def test_key_of_the_fp32_accumulator_and_empty_or_single_dims() -> None:
    acc = torch.empty(1, 77, 4, 64, dtype=torch.float32)
    key = map_key(acc, 64)
    assert key.fp32 and key.box_cols == 32 and key.strides[0] == 4 * 64 * 4
    assert key.strides[2] == 16  # batch of 1: a placeholder stride TMA accepts
    empty = torch.empty(1, 0, 2, 64, dtype=torch.float16)
    assert map_key(empty, 64).dims[1] == 1  # a map cannot be empty; the kernel reads nothing past 0


def test_views_tma_cannot_address_are_detected_and_refused() -> None:
    base = torch.empty(2, 100, 1, 64, dtype=torch.bfloat16)
    broadcast = base.expand(2, 100, 4, 64)  # heads stride 0
    assert not describable(broadcast)
    with pytest.raises(LaunchError, match="heads stride of 0 bytes.*contiguous"):
        map_key(broadcast, 64)
    assert describable(broadcast.contiguous())
    odd = torch.empty(2, 100, 3, 68, dtype=torch.bfloat16)[..., :64]  # heads 136 B apart: not a multiple of 16
    assert not describable(odd)
    assert describable(torch.empty(1, 1, 1, 64, dtype=torch.bfloat16))
