#!/usr/bin/env bash
# The input-class and fuzz verification on a GPU, one command on a CUDA machine (from the repository root):
#   bash scripts/issue26_gpu.sh [WORKERS]
# 1. MagicPIG's two fuzz finds, now catalog cases, plus the split-in-the-interpreter variant;
# 2. the full profile (every new class included);
# 3. a fuzz run of 6,300 cases (700 per family, seed 31337: the run that found them).
# Each step prints pytest's summary line and the suite's per-family table; records go to
# reports/runs/ and the merged page to reports/index.html.
set -u
W=${1:-8}
pytest -q --device cuda -n 2 cases/magicpig_decode.py -k "cos_pm1 and vals_large" 2>&1 | tail -6
pytest -q --device cuda -n "$W" 2>&1 | tail -16
pytest -q --device cuda -n "$W" --profile fuzz --fuzz-seed 31337 --fuzz-count 700 2>&1 | tail -16
