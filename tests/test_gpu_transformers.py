"""GPU tests of the Transformers backend with attngen's kernels: tiny random-weight Llama, Mistral, Qwen2,
Gemma 2 and gpt-oss models (tests/transformers_models.py) in bf16 on CUDA against eager attention.

Criteria (bf16 rounds every layer, so the truth is the same weights in float32 with eager attention):
- logits: ‖attngen_bf16 − eager_fp32‖/‖eager_fp32‖ at most 2x the same error of eager in bf16 (the bf16
  weights and activations dominate both; attngen's attention may not add noise of its own beyond that), on a
  plain batch, a left-padded batch (real positions) and a packed padding-free batch;
- 32 greedy steps: the tokens equal eager bf16's, or, where they first differ, the two candidates' float32
  logits after the common prefix are within bf16 noise of each other (twice the largest |eager_bf16 −
  eager_fp32| logit difference there), so the choice between them is a tie at bf16 precision.

Run on a machine with a CUDA device: `python -m pytest -m gpu tests/test_gpu_transformers.py`.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the GPU tests run on a machine with one", allow_module_level=True)
transformers = pytest.importorskip("transformers", reason="transformers is not installed (attngen does not "
                                   "depend on it; the backend's GPU tests need it)")

from attngen.integrations.transformers import register  # noqa: E402

from .gpu_reference import relative_error  # noqa: E402
from .transformers_models import MODELS, build, greedy, packed_logits  # noqa: E402

pytestmark = pytest.mark.gpu
STEPS = 32


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNGEN_POISON", "1")
    register()


def models(name: str) -> tuple[Any, Any, Any]:
    """(eager float32, eager bf16, attngen bf16) copies of one random model on CUDA, and its input ids."""
    fp32, ids = build(transformers, name, torch.float32, device="cuda")
    bf16 = copy.deepcopy(fp32).to(torch.bfloat16)
    ours = copy.deepcopy(bf16)
    ours.set_attn_implementation("attngen")
    return (fp32, bf16, ours), ids, torch.ones_like(ids)


def logits(model: Any, ids: Any, mask: Any = None) -> Any:
    with torch.no_grad():
        return model(ids, attention_mask=mask).logits.double()


@pytest.mark.parametrize("name", MODELS)
def test_logits_within_bf16_noise(name: str) -> None:
    (fp32, bf16, ours), ids, mask = models(name)
    mask[1, :5] = 0
    for what, m in (("plain", None), ("left-padded", mask)):
        truth, theirs, got = (logits(model, ids, m) for model in (fp32, bf16, ours))
        real = torch.ones_like(ids, dtype=torch.bool) if m is None else m.bool()
        err, eager_err = relative_error(got[real], truth[real]), relative_error(theirs[real], truth[real])
        print(f"{name} {what}: attngen bf16 {err:.2e}, eager bf16 {eager_err:.2e}")
        assert err <= 2 * eager_err, f"{name} {what}: attngen {err:.3e} vs eager bf16 {eager_err:.3e}"


@pytest.mark.parametrize("name", MODELS)
def test_packed_batch_within_bf16_noise(name: str) -> None:
    (fp32, bf16, ours), ids, _ = models(name)
    lengths = (5, 11, 7)
    got, _ = packed_logits(ours, ids, lengths)
    _, truth = packed_logits(fp32, ids, lengths)
    _, theirs = packed_logits(bf16, ids, lengths)
    err, eager_err = relative_error(got.double(), truth.double()), relative_error(theirs.double(), truth.double())
    print(f"{name} packed: attngen bf16 {err:.2e}, eager bf16 {eager_err:.2e}")
    assert err <= 2 * eager_err


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("padded", [False, True], ids=["plain", "left-padded"])
def test_greedy_generate_matches_eager(name: str, padded: bool) -> None:
    (fp32, bf16, ours), ids, mask = models(name)
    if padded:
        mask[0, :6] = 0
    want, got = greedy(bf16, ids, mask, STEPS), greedy(ours, ids, mask, STEPS)
    for row in range(ids.shape[0]):
        differ = (want[row] != got[row]).nonzero()
        if differ.numel() == 0:
            continue
        step = int(differ[0])
        prefix = torch.cat([ids[row], want[row, :step]])[None]
        keep = torch.cat([mask[row], torch.ones(step, dtype=mask.dtype, device=mask.device)])[None]
        truth, theirs = logits(fp32, prefix, keep)[0, -1], logits(bf16, prefix, keep)[0, -1]
        gap = (truth[want[row, step]] - truth[got[row, step]]).abs().item()
        noise = (theirs - truth).abs().max().item()
        print(f"{name} row {row}: first differs at step {step}, fp32 gap {gap:.3e}, bf16 noise {noise:.3e}")
        assert gap <= 2 * noise, f"{name} row {row} step {step}: a gap of {gap:.3e} is not a bf16 tie ({noise:.3e})"
