#!/bin/bash
# dq_convert under the dK/dV kernel's last wave (sm90_bwd_rows.DQ_OVERLAP) on the device: dq_deferred_device.sh's GPU tests
# and alternated A/B with this A/B's defaults. The tests are those of the backward and of packed batches (OV_TESTS;
# SKIP_TESTS=1 skips them). The A/B is against dq_convert after the whole grid, timed by CUDA events around 10 calls
# queued back to back (bwd_interleaved.py --timer events: a kernel sum would count the overlapped convert's wait, and
# one call's span under the profiler its host's gaps). OV_TIMER replaces the timer, OV_KINDS the kinds (fa4 among them
# when .fa4whl is carried); OV_TEST_LIMIT, OV_AB_LIMIT, OV_REPS, OV_HEAD_DIMS and OV_SEQLENS the rest.
#   bash benchmarks/dq_overlap_device.sh [tag]     (writes $OUT/<tag>/)
DD_KINDS=${OV_KINDS:-attngen:sm90_bwd_rows.DQ_OVERLAP=False,attngen} DD_TIMER=${OV_TIMER:-events} \
  DD_TESTS=${OV_TESTS:-tests/test_gpu_varlen.py tests/test_gpu_backward.py} DD_TEST_LIMIT=${OV_TEST_LIMIT:-240} \
  DD_AB_LIMIT=${OV_AB_LIMIT:-330} DD_REPS=${OV_REPS:-6} DD_HEAD_DIMS=${OV_HEAD_DIMS:-64,128} \
  DD_SEQLENS=${OV_SEQLENS:-2048,8192,16384} exec bash benchmarks/dq_deferred_device.sh "${1:-dq_overlap}"
