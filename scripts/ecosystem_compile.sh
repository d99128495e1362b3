#!/usr/bin/env bash
# Do the Triton-based libraries' kernels compile for Ascend today? The
# compile-only tier over the adapters (no NPU needed), from the repository root:
#
#   bash scripts/ecosystem_compile.sh [pytest args]
#
# Needs the npu-compile environment (tox -e npu-compile --notest builds it: triton-ascend 3.2.0,
# slow the first time) and FlagGems 5.0.2 installed with --no-deps into FG_DIR (from FG_WHEEL,
# default .wheels/flag_gems-5.0.2-py3-none-any.whl, PyYAML from FG_DEPS) with GEMS_VENDOR=ascend;
# vLLM's ops are tried too when vllm is importable there. Records:
# reports/runs/ecosystem-npu-compile; prints the suite's per-family table, one row per
# implementation, and the reason of any skip. Measured on this project's CPU machine
# (2026-11-26): FlagGems 5.0.2 does not import on a host without an Ascend device (its vendor
# probe needs torch.npu and the Triton driver's core count at import), so each of its cases is
# skipped with "FlagGems (flag_gems 5.0.2) is not usable here: AttributeError: module 'torch' has
# no attribute 'npu'", reported once. With a stand-in torch.npu (device count, properties) and
# the suite's host driver, the import goes further and stops at FlagGems' own ops/acos.py:
# "AttributeError: module 'triton.language.math' has no attribute 'acos'" -- FlagGems 5.0.2 on
# Ascend is built for FlagTree (its pinned flagtree 0.5.0+ascend3.2), not triton-ascend 3.2.0, so
# no FlagGems kernel reaches the compiler here. Run it where FlagTree and torch_npu are installed
# for per-kernel results.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-.tox/npu-compile/bin/python}
FG_WHEEL=${FG_WHEEL:-.wheels/flag_gems-5.0.2-py3-none-any.whl}
FG_DIR=${FG_DIR:-/tmp/attnsuite-flag-gems-npu}
FG_DEPS=${FG_DEPS:-.fg-deps}
[ -x "$PY" ] || { echo "no $PY: build it with 'tox -e npu-compile --notest'"; exit 2; }
"$PY" -m pip install -q --upgrade --no-deps --target "$FG_DIR" "$FG_WHEEL" || echo "FlagGems: no wheel at $FG_WHEEL"
"$PY" -c "import yaml, sqlalchemy" 2>/dev/null || "$PY" -m pip install -q --upgrade --no-deps --no-index \
    --find-links "$FG_DEPS" --target "$FG_DIR" pyyaml sqlalchemy || echo "FlagGems: no PyYAML/SQLAlchemy wheel in $FG_DEPS"
export PYTHONPATH="$FG_DIR:$PWD${PYTHONPATH:+:$PYTHONPATH}" GEMS_VENDOR=${GEMS_VENDOR:-ascend}
args=()
for fam in prefill decode prefill_varlen paged_decode; do
  args+=(--impl "$fam=flag_gems" --impl "$fam=vllm")
done
"$PY" -m pytest -q -p no:cacheprovider -n "${WORKERS:-2}" --device npu --compile-only \
    cases/prefill.py cases/decode.py cases/prefill_varlen.py cases/paged_decode.py "${args[@]}" \
    --records-dir reports/runs/ecosystem-npu-compile --report-html none -rs "$@" 2>&1 \
  | grep -E "SKIPPED|passed|failed|compile|^[a-z_]+ +npu" | sort | uniq -c | sort -rn | head -30
