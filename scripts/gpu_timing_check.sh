#!/usr/bin/env bash
# The timing machinery checked end to end on a fresh CUDA machine (no tune cache, no flags), from
# the repository root:
#
#     OUT=/tmp/gpu-check bash scripts/gpu_timing_check.sh
#
# 1. tunes every bench shape and writes kernels/tuned/<GPU>.json (scripts/tune_table.py);
# 2. runs the timing, lean-path and tune tests with --device cuda (their GPU parts: graph
#    replay and the profiler against a 1 GiB copy, host time kept out of device time, the direct
#    launch vs the JIT, graph replay of a decode call, every unchecked bench call capturable,
#    the new table valid);
# 3. host and device time of every wrapper and of SDPA (plain, and pinned to cuDNN / FLASH),
#    with the JIT path and the checked call for comparison (scripts/host_time.py);
# 4. the decode benchmarks as the suite runs them, each timed twice (--bench-repeat 2), printed
#    by attnsuite.bench.show.
# Everything is also written under $OUT. The exit status is that of the worst step.
# STEPS="3 4" runs only those steps (e.g. to split the run over two calls of under 8 minutes).
set -u
OUT=${OUT:-/tmp/attnsuite-gpu-check}
PY=${PYTHON:-python}
JOBS=${JOBS:-12}
STEPS=" ${STEPS:-1 2 3 4} "
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
# The user cache stays out of it: table or default only, as on a fresh machine.
export ATTNSUITE_TUNE_CACHE="$OUT/user-tune-cache.json"
status=0
run() { "$@" || status=$?; }

if [[ $STEPS == *" 1 "* ]]; then
    echo "== 1/4 tune table ($(date +%T))"
    run $PY scripts/tune_table.py --jobs "$JOBS" 2>&1 | tee "$OUT/tune_table.log"
    cp kernels/tuned/*.json "$OUT/" 2>/dev/null
fi
if [[ $STEPS == *" 2 "* ]]; then
    echo "== 2/4 GPU tests ($(date +%T))"
    run $PY -m pytest tests/test_timing.py tests/test_lean_path.py tests/test_tune.py --device cuda \
        -q -rs -p no:cacheprovider --report-html none --records-dir "$OUT/test-records" 2>&1 | tee "$OUT/tests.log"
fi
if [[ $STEPS == *" 3 "* ]]; then
    echo "== 3/4 host and device time per call ($(date +%T))"
    run $PY scripts/host_time.py --json "$OUT/host_time.json" 2>&1 | tee "$OUT/host_time.log"
fi
if [[ $STEPS == *" 4 "* ]]; then
    echo "== 4/4 decode benchmarks, timed twice ($(date +%T))"
    run $PY -m pytest benchmarks --device cuda --profile quick -k "decode and not sparse and not paged and not magicpig" \
        --bench-repeat 2 -q -p no:cacheprovider --report-html none --records-dir "$OUT/bench" 2>&1 | tail -5 | tee "$OUT/bench.log"
    $PY -m attnsuite.bench.show "$OUT/bench" 2>&1 | tee "$OUT/bench_show.log"
fi

echo "== done ($(date +%T)), status $status; outputs in $OUT"
exit $status
