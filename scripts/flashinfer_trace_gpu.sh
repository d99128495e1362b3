#!/usr/bin/env bash
# FlashInfer-Trace round trip on a GPU: the test workloads
# (tests/data/flashinfer_trace) as conformance and benchmark cases, traces written, then one line
# per trace: definition, workload uuid, status, max abs error, device latency (ms), reference
# latency (ms). PASSED traces should carry non-zero latencies here (on cpu they are zeros).
# Usage: scripts/flashinfer_trace_gpu.sh [WORKLOADS_DIR] [OUT_DIR] [extra pytest args...]
# Needs the safetensors package beside torch (pip install 'attnsuite[trace]', or a carried wheel
# on a machine without network): without it pytest stops at once, saying so.
set -euo pipefail
data=${1:-tests/data/flashinfer_trace}
out=${2:-/tmp/flashinfer-trace-out}
shift $(( $# > 2 ? 2 : $# )) || true
rm -rf "$out"
python -m pytest -q -p no:cacheprovider --device cuda -m workload cases benchmarks \
    --workloads="$data" --trace-out="$out" --report-html none "$@" || true
python - "$out" <<'PY'
import json, sys
from pathlib import Path
from attnsuite.flashinfer_trace.schema import validate_trace
for path in sorted(Path(sys.argv[1]).rglob("traces/**/*.jsonl")):
    for line in path.read_text().splitlines():
        t = json.loads(line)
        e, problems = t["evaluation"], validate_trace(t)
        perf = e.get("performance") or {}
        print(t["definition"], t["workload"]["uuid"], e["status"], (e.get("correctness") or {}).get("max_absolute_error"),
              perf.get("latency_ms"), perf.get("reference_latency_ms"), "VALID" if not problems else problems)
PY
