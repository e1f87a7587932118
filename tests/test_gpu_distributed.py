"""Context-parallel attention on two GPUs (NCCL, one process a GPU): the distributed forward and backward match
the single-GPU kernel on the whole sequence and the float64 reference, causal and not, every layout."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from tests.distributed_cases import Case

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu
NAMES = ("none", "causal", "window", "document", "sinks_window", "alibi_causal")
GPU_CASE = {"batch": 1, "seqlen": 2048, "heads": 8, "kv_heads": 2, "head_dim": 128}
#: bf16 against float64, as every GPU test (tests/gpu_reference.py); the distributed result against the single
#: GPU's is held to the same.
TOLERANCE = 1e-2


def _cases() -> list[Case]:
    cases = [Case(n, layout, **GPU_CASE) for n in NAMES for layout in ("zigzag", "contiguous")]
    return cases + [Case("causal", "zigzag", "all_gather", **GPU_CASE)]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[Case, dict]:
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices (the device tool's nvidia-h200-x2)")
    import torch.multiprocessing as mp

    from tests.distributed_cases import worker

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off on shared hosts
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path_factory.mktemp("cp_gpu")
    mp.spawn(worker, args=(2, f"tcp://127.0.0.1:{port}", _cases(), str(out), "compiled"), nprocs=2, join=True)
    found = json.loads((Path(out) / "outcomes.json").read_text())
    print(json.dumps(found, indent=1))
    return {Case(**o["case"]): o for o in found}


@pytest.mark.parametrize("case", _cases(), ids=lambda c: f"{c.spec}-{c.layout}-{c.strategy}")
def test_two_gpus_match_one(outcomes: dict, case: Case) -> None:
    errors = outcomes[case]["errors"]
    for name, err in errors.items():
        assert err == err, f"{name}: NaN or inf"
        if not name.startswith("single_"):
            assert err < TOLERANCE, f"{name}: relative error {err:.3e} ({case})"
