"""Per-step kernel time by kind from varlen_profile.py outputs: python benchmarks/varlen_kernel_sums.py DIR (with
DIR/profile_main.txt and DIR/profile_flat.txt, two rounds each, as flat_grid_device.sh writes them)."""
import collections
import re
import sys

for t in ("main","flat"):
    rows=collections.defaultdict(list)
    label=impl=None
    for line in open(f"{sys.argv[1]}/profile_{t}.txt"):
        m=re.match(r"^(varlen.{20,27}?)\s+(attngen|fa4)\s+fwd",line)
        if m: label,impl=m.group(1).strip(),m.group(2); continue
        m=re.match(r"^\s+([0-9.]+) us\s+(.*)",line)
        if m:
            name=m.group(2)
            if impl=="fa4": key="fa4 total"
            else: key=("tiles" if "_tiles" in name else "fwd" if "attn_fwd" in name else "dkdv" if "dkdv" in name else "pre" if "preprocess" in name else "dq fill+convert" if any(x in name for x in ("AUnary","FillFunc")) else "torch other")
            rows[(label,key)].append(float(m.group(1)))
    print("==",t)
    tot=collections.defaultdict(float)
    for (label,key),v in sorted(rows.items()):
        n=2
        print(f"  {label:28s} {key:16s} sum/round {sum(v)/n:8.1f}   " + " ".join(f"{x:.1f}" for x in v))
