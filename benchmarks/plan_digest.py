"""Record every plan the catalogue gets (forward and backward, every arch), or compare two records: the
proof that a restructuring left the planner's choices alone.

    python benchmarks/plan_digest.py record FILE.json
    python benchmarks/plan_digest.py compare OLD.json NEW.json   # keys only NEW has are ignored
"""

from __future__ import annotations

import json
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


def _missing(old: Any, new: Any, where: str) -> list[str]:
    """Where `new` differs from `old` (keys that only `new` has are not differences)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in old
                for d in (_missing(old[k], new[k], f"{where}.{k}") if k in new else [f"{where}.{k}: gone"])]
    return [] if old == new else [f"{where}: {old!r} -> {new!r}"]


def main() -> int:
    command, *paths = sys.argv[1:]
    if command == "record":
        with open(paths[0], "w") as handle:
            json.dump(_summaries(), handle, indent=1, sort_keys=True)
        return 0
    old, new = (json.loads(Path(p).read_text()) for p in paths)
    diffs = _missing(old, new, "")
    print("\n".join(diffs[:50]) or f"all {len(old)} plans unchanged")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
