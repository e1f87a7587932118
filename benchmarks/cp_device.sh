#!/usr/bin/env bash
# Context-parallel on the device machine's two H200s (nvidia-h200-x2): the GPU tests, the 128k benchmark and
# the training example, each bounded so that one call's limit leaves every earlier result under $OUT.
#   bash benchmarks/cp_device.sh [tests|bench|example|all]
. benchmarks/device_env.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
what=${1:-all}
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpus.txt"; nvidia-smi topo -m >> "$OUT/gpus.txt" 2>&1
if [[ $what == tests || $what == all ]]; then
  timeout 300 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_gpu_distributed.py > "$OUT/tests.txt" 2>&1
  tail -5 "$OUT/tests.txt"
fi
if [[ $what == bench || $what == all ]]; then
  timeout 240 python3 benchmarks/cp_bench.py --seqlen 131072 --out "$OUT/bench" > "$OUT/bench.txt" 2>&1
  tail -12 "$OUT/bench.txt"
fi
if [[ $what == example || $what == all ]]; then
  timeout 120 torchrun --nproc-per-node 2 examples/context_parallel_train.py --seqlen 16384 --steps 5 --check \
    > "$OUT/example.txt" 2>&1
  tail -8 "$OUT/example.txt"
fi
