#!/usr/bin/env bash
# The full conformance profile, then a fuzz run, on a CUDA machine (from the repository root):
#   bash scripts/gpu_full_and_fuzz.sh [WORKERS] [FUZZ_PER_FAMILY] [FUZZ_SEED]
# 1. the full profile (every catalog case of every registered family);
# 2. a fuzz run of FUZZ_PER_FAMILY cases per family (default 700; seed 31337, the seed of the run
#    whose finds became catalog cases).
# Each step prints pytest's summary line and the suite's per-family table; records go to
# reports/runs/ and the page to reports/index.html. The exit status is the worst step's.
set -u
W=${1:-8}
status=0
pytest -q --device cuda -n "$W" 2>&1 | tail -16; s=${PIPESTATUS[0]}; [ "$s" -gt "$status" ] && status=$s
pytest -q --device cuda -n "$W" --profile fuzz --fuzz-seed "${3:-31337}" --fuzz-count "${2:-700}" 2>&1 | tail -16
s=${PIPESTATUS[0]}; [ "$s" -gt "$status" ] && status=$s
exit $status
