#!/bin/bash
# The decode call's cost (decode_combine_cost.py; env SHAPES, PAGES), this tree against another checkout's
# templates and Python (ab_main/, made with `git archive main attngen templates | tar -x -C ab_main`), each in its
# own process, two rounds.
source benchmarks/device_env.sh
mkdir -p "$OUT/combine_ab"
for round in 1 2; do
  if [ -d ab_main/templates ]; then
    PYTHONPATH=$PWD/ab_main:$PYTHONPATH ATTNGEN_TEMPLATES=$PWD/ab_main/templates ATTNGEN_CACHE_DIR=/tmp/cache-main \
      python3 benchmarks/decode_combine_cost.py ${SHAPES:+--shapes $SHAPES} ${PAGES:+--page $PAGES} > "$OUT/combine_ab/main_$round.txt" 2>&1
  fi
  python3 benchmarks/decode_combine_cost.py ${SHAPES:+--shapes $SHAPES} ${PAGES:+--page $PAGES} > "$OUT/combine_ab/new_$round.txt" 2>&1
done
tail -n +1 "$OUT"/combine_ab/*.txt
