"""`attngen bench --variant SPEC`: one spec's kernel timed against its peers' equivalents.

Per spec and seqlen (batch = 16384 / seqlen, heads = 2048 / head_dim), forward, backward and forward+backward of
attngen's kernel, the plain kernel of the same shape (plain_of), FlexAttention under torch.compile with the
translated mods (flex_equiv) and FlashAttention-4 where it has the variant (fa4_kwargs). Each is first checked
against attngen.reference (float64) on a small shape, output and gradients, then timed. FLOPs count the visible
(q, kv) pairs exactly; ratios are plain time ratios; masked variants get the forward plan's tile shares.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..features.variant import Variant, variant_of
from ..spec.model import AttentionSpec
from ..spec.variant import MaskKind, TensorDecl
from . import flex_equiv, measure, model
from .flex_equiv import Inputs, Prepared, Unavailable

PREFIX, JSON_NAME, MD_NAME = "attngen-bench-variant", "variant.json", "variant.md"
IMPLS = ("attngen", "plain", "flex", "fa4")
CHECK_SEQLEN, CHECK_BATCH, CHECK_HEADS = 2048, 2, 2
GRAD_TOLERANCE = {"bf16": 3e-2, "fp16": 1e-2}
#: Query rows per block of the visible-pair count.
COUNT_ROWS = 256
#: FLOPs of the backward and of forward+backward as multiples of the forward's.
PASSES = {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}
Log = Callable[[str], None]


# ---- specs ---------------------------------------------------------------------------------------------------


def load(text: str) -> AttentionSpec:
    """A spec from a YAML path, or a catalogue spec by name (file stem or spec name); ValueError in one line."""
    from ..catalogue import catalogue_dir, load_catalogue_entries
    from ..errors import SpecError
    from ..spec.loader import load_spec

    path = Path(text)
    if not path.exists() and (catalogue_dir() / path.name).is_file():
        path = catalogue_dir() / path.name
    try:
        if path.suffix in (".yaml", ".yml") or path.exists():
            return load_spec(path)
        for file, spec in load_catalogue_entries():
            if text in (file.stem, spec.name):
                return spec
    except SpecError as exc:
        raise ValueError(" ".join(str(exc).split())) from None
    raise ValueError(f"--variant {text}: no such spec file, and no catalogue spec ({catalogue_dir()}) has that name")


def plain_of(spec: AttentionSpec) -> AttentionSpec:
    """The same shape without the variant: the spec's mask if a preset window (none, causal, window), else causal."""
    keep = spec.mask.kind in (MaskKind.none, MaskKind.causal, MaskKind.sliding_window)
    fields = spec.model_dump(mode="json", exclude={"name", "mask", "window", "score_mod", "sinks"})
    mask = spec.mask.model_dump(mode="json", exclude_none=True) if keep else "causal"
    return AttentionSpec.model_validate({**fields, "mask": mask})


# ---- runtime arguments ---------------------------------------------------------------------------------------


def _sizes(batch: int, heads: int, sq: int, sk: int) -> dict[str, int]:
    return {"batch": batch, "heads": heads, "kv_heads": heads, "seqlen_q": sq, "seqlen_k": sk}


def make_args(var: Variant, batch: int, heads: int, sq: int, sk: int, device: Any, gen: Any) -> dict[str, Any]:
    """Random values for the declared arguments: sinks randn(heads) (bf16-exact, requiring grad); prefix_len
    ints in [0, sk]; an int tensor over a seqlen dim sorted segment ids (about 8 per row); ALiBi's slopes the
    standard ones; other floats 0.5 * randn, other ints in [0, 4); scalars: ints in [0, sk], floats in [0.5, 1.5)."""
    import torch

    from ..features.score_mod import ALIBI_SLOPES, alibi_slopes

    out: dict[str, Any] = {}
    for arg in var.arguments():
        decl = arg.decl
        if arg.computed:
            continue
        if not isinstance(decl, TensorDecl):
            value = torch.rand((), generator=gen).item()
            out[arg.name] = int(value * (sk + 1)) if decl.dtype == "int32" else 0.5 + value
            continue
        shape = tuple(d if isinstance(d, int) else _sizes(batch, heads, sq, sk)[d] for d in decl.shape)
        if arg.differentiable:
            t = torch.randn(shape, generator=gen).bfloat16().float().requires_grad_()
        elif arg.name == ALIBI_SLOPES:
            t = torch.tensor(alibi_slopes(heads), dtype=torch.float32)
        elif decl.dtype == "fp32":
            t = 0.5 * torch.randn(shape, generator=gen)
        elif arg.name == "prefix_len":
            t = torch.randint(0, sk + 1, shape, generator=gen, dtype=torch.int32)
        elif decl.shape[-1] in ("seqlen_q", "seqlen_k"):
            cuts = torch.rand(shape, generator=gen) < 8.0 / shape[-1]
            t = torch.cumsum(cuts.int(), dim=-1).to(torch.int32)
        else:
            t = torch.randint(0, 4, shape, generator=gen, dtype=torch.int32)
        out[arg.name] = t.detach().to(device).requires_grad_(t.requires_grad)
    return out


def numpy_args(var: Variant, args: Mapping[str, Any], heads: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(tensors, scalars) as the NumPy twins read them (attngen's computed tensors included)."""
    closure = flex_equiv.closure_of(var, args, 1, 1, heads, "cpu")
    tensors = {n: t.detach().cpu().double().numpy() if t.is_floating_point() else t.detach().cpu().long().numpy()
               for n, t in closure.tensors.items()}
    return tensors, dict(closure.scalars)


# ---- FLOPs ---------------------------------------------------------------------------------------------------


def visible_pairs(var: Variant, batch: int, heads: int, sq: int, sk: int, tensors: Mapping[str, Any] | None = None,
                  scalars: Mapping[str, Any] | None = None) -> int:
    """The exact number of visible (q, kv) pairs over every batch element and head."""
    from .. import expr as lang

    mask = var.mask
    tree = mask.parsed()
    if tree is None:
        return batch * heads * sq * sk
    if mask.kind is MaskKind.causal:
        return batch * heads * int(np.clip(np.arange(sq) + sk - sq + 1, 0, sk).sum())
    bs = range(batch) if lang.depends_on(tree, "b") else range(1)
    hs = range(heads) if lang.depends_on(tree, "h") else range(1)
    cols, total = np.arange(sk), 0
    for b in bs:
        for h in hs:
            for r0 in range(0, sq, COUNT_ROWS):
                rows = np.arange(r0, min(sq, r0 + COUNT_ROWS))
                total += int(mask.visible(rows, cols, sq, sk, b=b, h=h, tensors=tensors, scalars=scalars).sum())
    return total * (batch // len(bs)) * (heads // len(hs))


def pass_flops(pairs: int, head_dim: int) -> dict[str, float]:
    return {p: 4.0 * head_dim * pairs * k for p, k in PASSES.items()}


def prepare(name: str, spec: AttentionSpec, kernel: Any, x: Inputs) -> Prepared:
    """`name` of IMPLS on the inputs; `kernel` attngen's compiled kernel of the spec (of the plain spec for
    'plain'), or the exception its compile raised."""
    if isinstance(kernel, Exception):
        raise kernel
    if name in ("attngen", "plain"):
        sinks = flex_equiv.sinks_leaf(x.args) if name == "attngen" else {}
        args = {**x.args, **sinks} if name == "attngen" else {}
        q, k, v = x.leaves()
        names = ("dq", "dk", "dv", *("dsinks" for _ in sinks))
        return Prepared(lambda: kernel(q, k, v, **args), (q, k, v, *sinks.values()), names)
    return flex_equiv.prepare_flex(spec, x) if name == "flex" else flex_equiv.prepare_fa4(spec, x)


# ---- check, then time ------------------------------------------------------------------------------------------


def make_inputs(spec: AttentionSpec, batch: int, heads: int, seqlen: int, seed: int) -> Inputs:
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    shape, dtype = (batch, seqlen, heads, spec.head_dim), measure.torch_dtype(spec.dtype.value)
    q, k, v, dout = (torch.randn(shape, device="cuda", dtype=dtype, generator=gen) for _ in range(4))
    args = make_args(variant_of(spec), batch, heads, seqlen, seqlen, "cuda", torch.Generator().manual_seed(seed))
    return Inputs(q, k, v, dout, args)


def check(prep: Prepared, ref_spec: AttentionSpec, x: Inputs, dtype: str) -> dict[str, Any]:
    """The output and the gradients against attngen.reference: errors, and 'error' (nothing timed) or
    'bwd_error' (the backward not timed) when one is over its tolerance or fails."""
    import torch

    import attngen

    args = x.args if not variant_of(ref_spec).is_plain else {}
    out = prep.forward()
    ref_out, _ = attngen.reference(ref_spec, x.q, x.k, x.v, **args)
    ref = torch.from_numpy(ref_out).to(out.device)
    result: dict[str, Any] = {"fwd_err": measure.relative_error(out.detach(), ref)}
    if not result["fwd_err"] < model.TOLERANCE[dtype]:
        return {**result, "error": f"relative error {result['fwd_err']:.3g} over {model.TOLERANCE[dtype]}"}
    try:
        grads = torch.autograd.grad(out, prep.leaves, x.dout)
    except Exception as exc:  # no backward for this variant: the forward is still timed
        return {**result, "bwd_error": f"{type(exc).__name__}: {exc}"[:500]}
    want = attngen.reference.grads(ref_spec, x.q, x.k, x.v, x.dout, **args)
    errs = {}
    for name, g in zip(prep.names, grads, strict=True):
        g = g.transpose(1, 2) if prep.heads_first and name != "dsinks" else g
        errs[name] = measure.relative_error(g.detach(), torch.from_numpy(want[name]).to(g.device))
    result["grad_err"] = errs
    worst = max(errs, key=lambda n: errs[n])
    if not errs[worst] < GRAD_TOLERANCE[dtype]:
        result["bwd_error"] = f"{worst} relative error {errs[worst]:.3g} over {GRAD_TOLERANCE[dtype]}"
    return result


def time_passes(prep: Prepared, dout: Any, backward: bool) -> dict[str, Any]:
    """Medians in ms: forward (no autograd graph), backward of one retained forward, forward+backward."""
    import torch

    with torch.no_grad():
        first = prep.forward()
        torch.cuda.synchronize()
        times = {"fwd_ms": measure.time_ms(prep.forward)}
    if backward:
        grads = prep.leaves
        out = prep.forward()
        times["bwd_ms"] = measure.time_ms(lambda: torch.autograd.grad(out, grads, dout, retain_graph=True))
        times["fwdbwd_ms"] = measure.time_ms(lambda: torch.autograd.grad(prep.forward(), grads, dout))
    return {**times, "out": first}


def measure_impl(name: str, spec: AttentionSpec, kernel: Any, small: Inputs, full: Inputs) -> dict[str, Any]:
    """{'status': ok | failed | unavailable, 'check': ..., '<pass>_ms': ...} of one implementation."""
    import torch

    try:
        entry: dict[str, Any] = {"check": check(prepare(name, spec, kernel, small), spec, small, spec.dtype.value)}
        if "error" in entry["check"]:
            return {**entry, "status": "failed", "error": entry["check"]["error"]}
        entry.update(time_passes(prepare(name, spec, kernel, full), full.dout, "bwd_error" not in entry["check"]))
        return {**entry, "status": "ok"}
    except Unavailable as exc:
        return {"status": "unavailable", "error": str(exc)}
    except Exception as exc:  # one implementation's failure is its result
        torch.cuda.empty_cache()
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:2000]}


def tiles(spec: AttentionSpec, plain: AttentionSpec, kernels: Mapping[str, Any], seqlen: int) -> dict[str, Any]:
    """The forward plans' tile shares (empty / partial / full) of the variant and the plain kernel, and the
    plain / variant ratio of the tiles run: the speed-up block skipping alone predicts."""
    out: dict[str, Any] = {}
    for key, s in (("variant", spec), ("plain", plain)):
        plan = next(iter(kernels["attngen" if key == "variant" else "plain"].cubins.values())).source.plan
        shares = variant_of(s).mask.tile_shares(plan.block_m, plan.block_n, seqlen, seqlen)
        out[key] = {**shares, "block_m": plan.block_m, "block_n": plan.block_n}
    run_share = {k: out[k]["partial"] + out[k]["full"] for k in ("variant", "plain")}
    out["expected_plain_over_variant"] = run_share["plain"] / run_share["variant"] if run_share["variant"] else None
    #: The classifier counts a mask's tensors as unknown values (as `attngen explain` does): an upper bound.
    out["tensors_unknown"] = bool(variant_of(spec).mask.tensors)
    return out


def ratios(impls: Mapping[str, Any]) -> dict[str, dict[str, float | None]]:
    """variant / plain time, and each peer's time / attngen's (> 1: attngen is faster), per pass."""
    def ms(name: str, p: str) -> float | None:
        return impls.get(name, {}).get(f"{p}_ms")

    pairs = {"variant/plain": ("attngen", "plain"), "flex/attngen": ("flex", "attngen"),
             "fa4/attngen": ("fa4", "attngen")}
    return {label: {p: model.ratio(ms(a, p), ms(b, p)) for p in PASSES} for label, (a, b) in pairs.items()}


# ---- the run ---------------------------------------------------------------------------------------------------


def run_row(spec: AttentionSpec, plain: AttentionSpec, kernels: Mapping[str, Any], seqlen: int, seed: int,
            log: Log) -> dict[str, Any]:
    """Every implementation of one spec at one seqlen; FLOPs and TFLOP/s on the visible pairs."""
    import torch

    cfg = model.Config(spec.head_dim, seqlen, causal=False)
    small = make_inputs(spec, CHECK_BATCH, CHECK_HEADS, min(seqlen, CHECK_SEQLEN), seed)
    full = make_inputs(spec, cfg.batch, cfg.heads, seqlen, seed + 1)
    var = variant_of(spec)
    tensors, scalars = numpy_args(var, full.args, cfg.heads)
    pairs = visible_pairs(var, cfg.batch, cfg.heads, seqlen, seqlen, tensors, scalars)
    plain_pairs = visible_pairs(variant_of(plain), cfg.batch, cfg.heads, seqlen, seqlen)
    row: dict[str, Any] = {"spec": spec.name, "plain": plain.name, "seqlen": seqlen, "batch": cfg.batch,
                           "heads": cfg.heads, "head_dim": spec.head_dim, "dtype": spec.dtype.value,
                           "visible_pairs": pairs, "density": pairs / (cfg.batch * cfg.heads * seqlen * seqlen),
                           "plain_visible_pairs": plain_pairs, "impls": {}}
    outs = {}
    for name in IMPLS:
        entry = measure_impl(name, plain if name == "plain" else spec, kernels.get(name), small, full)
        outs[name] = entry.pop("out", None)
        flops = pass_flops(plain_pairs if name == "plain" else pairs, spec.head_dim)
        for p in PASSES:
            if entry.get(f"{p}_ms"):
                entry[f"{p}_tflops"] = model.tflops(flops[p], entry[f"{p}_ms"])
        row["impls"][name] = entry
        log(impl_line(row, name))
    if outs["attngen"] is not None and outs["flex"] is not None:
        row["attngen_vs_flex_err"] = measure.relative_error(outs["attngen"], outs["flex"].double())
        log(f"{spec.name}: attngen against flex at the timed shape: relative difference "
            f"{row['attngen_vs_flex_err']:.1e}")
    del outs, small, full
    torch.cuda.empty_cache()
    row["ratios"] = ratios(row["impls"])
    if spec.mask.kind is not MaskKind.none and not any(isinstance(k, Exception) for k in kernels.values()):
        row["tiles"] = tiles(spec, plain, kernels, seqlen)
    return row


def run(specs: Sequence[AttentionSpec], seqlens: Sequence[int], out: Path | None,
        log: Log = print) -> tuple[Path, list[Path], float]:
    """Every spec at every seqlen; reports rewritten after each row. Returns (folder, files, seconds)."""
    import torch

    from . import output
    from .runner import BenchError

    if not torch.cuda.is_available():
        raise BenchError("the benchmark needs a CUDA GPU; torch sees none")
    started = time.perf_counter()
    env = measure.environment()
    target = out or output.default_folder(env["gpu"], PREFIX)
    results: dict[str, Any] = {"environment": env, "rows": [], "settings": {
        "tokens": model.TOKENS, "hidden": model.HIDDEN, "timer": measure.timer_name(), "statistic": "median",
        "check": {"batch": CHECK_BATCH, "heads": CHECK_HEADS, "seqlen": CHECK_SEQLEN, "reference": "float64"},
        "flops": "4 * head_dim per visible (q, kv) pair forward; backward 2.5x, forward+backward 3.5x",
        "flex": flex_equiv.SINKS_NOTE}}
    log(f"attngen bench --variant on {env['gpu']} -> {target}")
    paths: list[Path] = []
    for spec in specs:
        plain = plain_of(spec)
        kernels = {"attngen": _compile(spec, log), "plain": _compile(plain, log)}
        for seqlen in seqlens:
            results["rows"].append(run_row(spec, plain, kernels, seqlen, len(results["rows"]) * 10, log))
            log(summary_line(results["rows"][-1]))
            paths = write(results, target)
    return target, paths, time.perf_counter() - started


def _compile(spec: AttentionSpec, log: Log) -> Any:
    """attngen.compile(spec), or the exception it raised (that implementation's rows then record it)."""
    import attngen

    try:
        return attngen.compile(spec)
    except Exception as exc:  # recorded per row; the peers still run
        log(f"{spec.name}: compile FAILED: {type(exc).__name__}: {exc}"[:500])
        return exc


# ---- reports ---------------------------------------------------------------------------------------------------


def _x(value: float | None) -> str:
    return f"x{value:.2f}" if value is not None and math.isfinite(value) else "-"


def impl_line(row: Mapping[str, Any], name: str) -> str:
    e = row["impls"][name]
    head = f"{row['spec']} s{model.seqlen_label(row['seqlen'])} {name:8s}"
    if e["status"] != "ok":
        return f"{head} {e['status'].upper()}: {e.get('error', '')}"[:300]
    parts = [f"{p} {e[f'{p}_ms']:.3f} ms {e[f'{p}_tflops']:.0f} TFLOP/s" for p in PASSES if f"{p}_ms" in e]
    note = f" (backward: {e['check']['bwd_error']})" if "bwd_error" in e["check"] else ""
    return f"{head} {', '.join(parts)}; check err {e['check']['fwd_err']:.1e}{note}"[:400]


def summary_line(row: Mapping[str, Any]) -> str:
    r = row["ratios"]
    text = "; ".join(f"{label} " + " ".join(f"{p} {_x(v)}" for p, v in r[label].items()) for label in r)
    tiles_ = row.get("tiles")
    if tiles_:
        text += (f"; tiles empty {tiles_['variant']['empty']:.1%} (plain {tiles_['plain']['empty']:.1%}): "
                 f"plain/variant expected {_x(tiles_['expected_plain_over_variant'])}"
                 f"{' (mask tensors counted unknown)' if tiles_.get('tensors_unknown') else ''}")
    return f"{row['spec']} s{model.seqlen_label(row['seqlen'])} time ratios: {text}"


def markdown(results: Mapping[str, Any]) -> str:
    env = results["environment"]
    out = [f"# attngen bench --variant: {env.get('gpu', '?')}", "",
           f"{env.get('date', '')}; torch {env.get('torch')}, triton {env.get('triton')}, attngen "
           f"{env.get('attngen')}. FLOPs on visible (q, kv) pairs: {results['settings']['flops']}.", "",
           "| spec | seqlen | impl | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s "
           "| check |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in results["rows"]:
        for name, e in row["impls"].items():
            cells = [f"{e[k]:.3f}" if k.endswith("ms") else f"{e[k]:.0f}" if e.get(k) else "-"
                     for p in PASSES for k in (f"{p}_ms", f"{p}_tflops") if k in e] or ["-"] * 6
            cells += ["-"] * (6 - len(cells))
            status = f"err {e['check']['fwd_err']:.1e}" if e["status"] == "ok" else e["status"]
            out.append(f"| {row['spec']} | {row['seqlen']} | {name} | {' | '.join(cells)} | {status} |")
    out += ["", "Time ratios per pass (fwd, bwd, fwd+bwd): variant / plain (<= 1.05 / 1.10 for a score mod or "
            "sinks), peer / attngen (> 1: attngen faster); tiles run (partial + full) and the plain / variant "
            "ratio they predict (*: the mask's tensors counted as unknown values).", "",
            "| spec | seqlen | variant / plain | flex / attngen | fa4 / attngen | tiles empty "
            "| expected plain / variant |",
            "|---|---|---|---|---|---|---|"]
    for row in results["rows"]:
        r, t = row["ratios"], row.get("tiles")
        cells = [" ".join(_x(v) for v in r[label].values()) for label in r]
        unknown = "*" if t and t.get("tensors_unknown") else ""
        tile_cells = [f"{t['variant']['empty']:.1%}{unknown}", _x(t["expected_plain_over_variant"])] if t else ["-"] * 2
        out.append(f"| {row['spec']} | {row['seqlen']} | {' | '.join(cells + tile_cells)} |")
    return "\n".join(out) + "\n"


def write(results: Mapping[str, Any], out: Path) -> list[Path]:
    from .report import _clean

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / JSON_NAME, out / MD_NAME]
    paths[0].write_text(json.dumps(_clean(results), indent=1, default=str) + "\n")
    paths[1].write_text(markdown(results))
    return paths
