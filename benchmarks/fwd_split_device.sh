#!/bin/bash
# The multistage forward's single-buffer tiling (sm80_fwd.MEASURED): the GPU forward tests of the hd256 catalogue
# specs and the variants through `pipeline: multistage`, then the hd256 sweep's two best-ranked tilings beside FA2.
source benchmarks/device_env.sh
gpu_tests 250 "$OUT/tests_forward_multistage.txt" tests/test_gpu_forward.py -k "multistage and 256"
gpu_tests 250 "$OUT/tests_variants_multistage.txt" tests/test_gpu_variants.py -k multistage
timeout 150 python3 benchmarks/sweep_tilings.py --head-dims 256 --pipeline multistage --max-candidates 2 \
  --out "$OUT/sweep_256.json" > "$OUT/sweep_256.txt" 2>&1
echo "sweep rc $? after ${SECONDS}s" >> "$OUT/sweep_256.txt"
grep -v Warning "$OUT/sweep_256.txt"
