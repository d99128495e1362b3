#!/usr/bin/env bash
# The suite's own GPU minutes (conformance and benchmark profiles, timed) on a lent CUDA
# machine, from the repository root, one step per call (each well under 10 minutes on one H100):
#
#     STEP=bench OUT=/tmp/i28 bash scripts/gpu_minutes.sh            # full benchmark profile, timed
#     STEP=compare BEFORE=/path/to/old/bench-records OUT=/tmp/i28 bash scripts/gpu_minutes.sh
#     STEP=bench2 OUT=/tmp/i28 bash scripts/gpu_minutes.sh           # the same on every GPU: -n <GPUs>
#     STEP=conformance OUT=/tmp/i28 bash scripts/gpu_minutes.sh      # full conformance profile, -n 8 per GPU
#     STEP=stop OUT=/tmp/i28 bash scripts/gpu_minutes.sh             # timeout(1) stops a benchmark run quietly
#
# What each prints (and writes under $OUT):
#   bench:       "bench wall_s=<seconds>" (target: <= 180 on one H100) and the suite's summary;
#                records in $OUT/bench-records.
#   compare:     python -m attnsuite.bench.compare BEFORE $OUT/bench-records --threshold 0.03:
#                every bench case's kernel and baseline device-time medians in both runs and
#                their spread; exit status 1 when a spread is over 3% (the kernel's lines are the
#                ones the timing targets name; a baseline timed with fewer runs may move more).
#                BEFORE: the records directory of the same step run on an earlier tree.
#   bench2:      "bench2 gpus=<N> wall_s=<seconds>" (about bench's wall_s / N) and the per-device
#                case time from the records (the report's "Hosts and devices" table, printed).
#   conformance: "conformance wall_s=<seconds>" (target: <= 75 on one H100) and the phase shares.
#   stop:        "stop traceback_lines=<n> summary=<yes|no> run_json=<yes|no>" (want 0, yes, yes).
set -u
OUT=${OUT:-/tmp/attnsuite-i28}
PY=${PYTHON:-python}
STEP=${STEP:-bench}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
gpus=$($PY -c "import torch; print(torch.cuda.device_count())")

placement() {  # the report's per-device table, as text
    $PY - "$1" <<'EOF'
import sys
from attnsuite.records import read_records, merge_latest
from attnsuite.report.placement import placement_rows
for r in placement_rows(merge_latest(read_records([sys.argv[1]]))):
    counts = " ".join(f"{c['count']} {c['outcome']}" for c in r["counts"])
    print(f"{r['host']:<16} {r['device']:<8} {r['uuid'][:20]:<20} cases={r['cases']:<5} bench={r['benchmarks']:<4} "
          f"time={r['total']:<8} share={r['share']:<5} {counts}")
EOF
}

timed() {  # timed NAME CMD...: prints "NAME wall_s=..."
    local name=$1
    shift
    local t0=$SECONDS
    "$@"
    local rc=$?
    echo "$name wall_s=$((SECONDS - t0))"
    return $rc
}

case $STEP in
bench)
    rm -rf "$OUT/bench-records"
    timed bench $PY -m pytest benchmarks --device cuda --profile full -q -p no:cacheprovider \
        --records-dir "$OUT/bench-records" --report-html "$OUT/bench.html" 2>&1 | tee "$OUT/bench.log" | tail -25
    ;;
compare)
    $PY -m attnsuite.bench.compare "${BEFORE:?set BEFORE to the bench records of the tree before}" "$OUT/bench-records" \
        --threshold 0.03 | tee "$OUT/compare.log"
    ;;
bench2)
    rm -rf "$OUT/bench2-records"
    timed "bench2 gpus=$gpus" $PY -m pytest benchmarks --device cuda --profile full -q -p no:cacheprovider \
        -n "$gpus" --records-dir "$OUT/bench2-records" --report-html "$OUT/bench2.html" 2>&1 \
        | tee "$OUT/bench2.log" | tail -25
    placement "$OUT/bench2-records"
    ;;
conformance)
    rm -rf "$OUT/conf-records"
    timed conformance $PY -m pytest --device cuda --profile full -q -p no:cacheprovider -n $((8 * gpus)) \
        --records-dir "$OUT/conf-records" --report-html "$OUT/conformance.html" 2>&1 | tee "$OUT/conformance.log" | tail -15
    $PY - "$OUT/conf-records" <<'EOF'
import sys, collections
from attnsuite.records import read_records
phases = collections.Counter()
for r in read_records([sys.argv[1]]):
    phases.update(r["phases"])
total = sum(phases.values()) or 1
print("phases:", ", ".join(f"{k} {v / total:.0%}" for k, v in phases.most_common()))
EOF
    placement "$OUT/conf-records"
    ;;
stop)
    rm -rf "$OUT/stop-records"
    timeout 60 $PY -m pytest benchmarks --device cuda --profile full -q -p no:cacheprovider -n "$gpus" \
        --records-dir "$OUT/stop-records" --report-html "$OUT/stop.html" > "$OUT/stop.log" 2>&1
    tb=$(grep -c -E "Traceback|KeyboardInterrupt" "$OUT/stop.log")
    summary=$(grep -q "^records: " "$OUT/stop.log" && echo yes || echo no)
    runjson=$([ -f "$OUT/stop-records/run.json" ] && echo yes || echo no)
    echo "stop traceback_lines=$tb summary=$summary run_json=$runjson"
    tail -12 "$OUT/stop.log"
    ;;
*)
    echo "STEP must be bench, compare, bench2, conformance or stop" >&2
    exit 2
    ;;
esac
