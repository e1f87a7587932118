"""Record every plan the catalogue gets (forward and backward, every arch), or compare two records: the
proof that a restructuring left the planner's choices alone.

    python benchmarks/plan_digest.py record FILE.json
    python benchmarks/plan_digest.py compare OLD.json NEW.json   # keys only NEW has are ignored
    python benchmarks/plan_digest.py compare OLD.json NEW.json --choices

`--choices` compares what was chosen, not what the cost models say of it: every plan's `cost` is left out and the
numbers in its reason are masked (a recalibration of a model's absolute figures changes both and no choice).

A backward plan recorded before the backward kernel families (one plan, with the sm90 wgmma tiling as an
optional `hopper` field beside the mma.sync tiles) is compared in the shape the families give it
(`_family_shape`): with `hopper` set it is the sm90_bwd plan (family sm90_bwd, `dkdv_wgmma` = the old
`hopper`, the same kernel name and preprocess rows; its reason is its family's own now, not compared);
without, the sm80_bwd plan (family sm80_bwd, the same tiles, `dq_atomic` and kernel name; the reason
without its last clause, which named the wgmma kernel or why there was none: explain gives that as the
other family's refusal now).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from attngen.catalogue import load_catalogue
from attngen.errors import PlanError
from attngen.spec.model import Arch


def _summaries() -> dict[str, Any]:
    from attngen.planning.planner import plan
    from attngen.planning.planner_bwd import plan_bwd

    out: dict[str, Any] = {}
    for spec in load_catalogue():
        for arch in Arch:
            for kind, fn in (("fwd", plan), ("bwd", plan_bwd)):
                try:
                    out[f"{spec.name}/{arch.value}/{kind}"] = fn(spec, arch).summary()
                except PlanError as exc:
                    out[f"{spec.name}/{arch.value}/{kind}"] = {"PlanError": str(exc)}
    return out


#: The last clause of a backward reason before the families: about the wgmma kernel.
_WGMMA_CLAUSE = re.compile(r"; (no wgmma kernel \(.*\)|sm90: the wgmma dK/dV kernel .* replaces dkdv and dq)$")


def _family_shape(old: Any) -> Any:
    """A backward summary recorded before the backward families, in the families' shape (as it is otherwise)."""
    if not isinstance(old, dict) or "hopper" not in old:
        return old
    if old["hopper"] is not None:
        return {"kernel_name": old["kernel_name"], "arch": old["arch"], "family": "sm90_bwd",
                "dkdv_wgmma": old["hopper"], "preprocess_rows": old["preprocess_rows"]}
    rest = {k: v for k, v in old.items() if k != "hopper"}
    return {**rest, "family": "sm80_bwd", "reason": _WGMMA_CLAUSE.sub("", old["reason"])}


def _missing(old: Any, new: Any, where: str) -> list[str]:
    """Where `new` differs from `old` (keys that only `new` has are not differences)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in old
                for d in (_missing(old[k], new[k], f"{where}.{k}") if k in new else [f"{where}.{k}: gone"])]
    return [] if old == new else [f"{where}: {old!r} -> {new!r}"]


def _choices(plan: Any) -> Any:
    """A plan summary without its cost figures: no `cost`, and the numbers of its reason masked."""
    if not isinstance(plan, dict):
        return plan
    out = {k: v for k, v in plan.items() if k != "cost"}
    if isinstance(out.get("reason"), str):
        out["reason"] = re.sub(r"\d+(\.\d+)?", "#", out["reason"])
    return out


def main() -> int:
    command, *paths = sys.argv[1:]
    choices = "--choices" in paths
    paths = [p for p in paths if p != "--choices"]
    if command == "record":
        with open(paths[0], "w") as handle:
            json.dump(_summaries(), handle, indent=1, sort_keys=True)
        return 0
    old, new = (json.loads(Path(p).read_text()) for p in paths)
    reshaped = {k: _family_shape(v) for k, v in old.items()}
    moved = sum(1 for k in old if reshaped[k] is not old[k])
    to_sm90 = sum(1 for v in reshaped.values() if isinstance(v, dict) and v.get("family") == "sm90_bwd")
    if moved:
        print(f"{moved} backward plans recorded before the backward families compared in their family's shape "
              f"({to_sm90} sm90_bwd, {moved - to_sm90} sm80_bwd)")
    if choices:
        reshaped, new = ({k: _choices(v) for k, v in d.items()} for d in (reshaped, new))
    diffs = _missing(reshaped, new, "")
    what = "plan choices (cost figures aside)" if choices else "plans"
    print("\n".join(diffs[:50]) or f"all {len(old)} {what} unchanged")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
