#!/bin/bash
# The varlen step's forward / backward / per-kernel split against FlashAttention-4 (device machine, ~3 min):
# .whl and .fa4whl carried (move generated/ and benchmarks/results/ out of the tree for the call).
#   bash benchmarks/varlen_profile_device.sh    (writes $OUT/profile.txt)
. benchmarks/device_env.sh
fa4_peer || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
python3 benchmarks/varlen_profile.py --rounds "${ROUNDS:-1}" 2>&1 | tee "$OUT/profile.txt" | grep -v "^      "
