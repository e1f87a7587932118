#!/bin/bash
# `attngen bench --decode` at pages of 16 and 256 keys (env PAGES), FlashAttention-2 and cuDNN in each run, after
# the GPU decode tests. Writes $OUT/page_<n>/ (decode.json, decode.md) and the logs.
. benchmarks/device_env.sh
SECONDS=0
for page in ${PAGES:-16 256}; do
  python3 -m attngen bench --decode --page-size "$page" --peers flash,cudnn --budget-s "${BUDGET_S:-200}" \
    --out "$OUT/page_$page" > "$OUT/page_$page.log" 2>&1
  echo "page $page rc $? after ${SECONDS}s"
  rm -f "$OUT"/page_"$page"/*.png
done
cat "$OUT"/page_*/decode.md 2>/dev/null | head -60
