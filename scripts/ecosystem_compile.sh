#!/usr/bin/env bash
# Do the Triton-based libraries' kernels (FlagGems, vLLM) compile for Ascend today? The
# compile-only tier over their adapters (no NPU needed), from the repository root:
#
#   bash scripts/ecosystem_compile.sh [pytest args]
#
# Needs the npu-compile environment (tox -e npu-compile --notest builds it: triton-ascend 3.2.0,
# slow the first time) and FlagGems 5.0.2 installed with --no-deps into FG_DIR (from FG_WHEEL,
# default .wheels/flag_gems-5.0.2-py3-none-any.whl, PyYAML from FG_DEPS) with GEMS_VENDOR=ascend;
# vLLM's ops are tried too when vllm is importable there. Without the wheel (or PyYAML and
# SQLAlchemy for this Python) it says so in one line and exits 2, compiling nothing. Records:
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
[ -f "$FG_WHEEL" ] || { echo "FlagGems: no wheel at $FG_WHEEL (put flag_gems-5.0.2-py3-none-any.whl there, or set FG_WHEEL): nothing compiled"; exit 2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$PY" -m pip install -q --upgrade --no-deps --target "$FG_DIR" "$FG_WHEEL" >"$log" 2>&1 \
  || { echo "FlagGems: pip could not install $FG_WHEEL into $FG_DIR: $(grep -m1 -i error "$log")"; exit 2; }
if ! "$PY" -c "import yaml, sqlalchemy" 2>/dev/null; then
  "$PY" -m pip install -q --upgrade --no-deps --no-index --find-links "$FG_DEPS" --target "$FG_DIR" pyyaml sqlalchemy \
      >"$log" 2>&1 \
    || { echo "FlagGems imports PyYAML and SQLAlchemy: no wheels of them for this Python in $FG_DEPS (set FG_DEPS): nothing compiled"; exit 2; }
fi
export PYTHONPATH="$FG_DIR:$PWD${PYTHONPATH:+:$PYTHONPATH}" GEMS_VENDOR=${GEMS_VENDOR:-ascend}
# The families FlagGems or vLLM has an adapter for, and the --impl options for them, from the
# adapters themselves.
read -r -a args < <("$PY" -c "
from attnsuite.ecosystem import flag_gems, vllm
for module in (flag_gems, vllm):
    for fam, impls in module.IMPLS.items():
        for name in impls:
            print('--impl', f'{fam}={name}', end=' ')
print()")
read -r -a files < <("$PY" -c "
from attnsuite.ecosystem import flag_gems, vllm
print(*[f'cases/{fam}.py' for fam in dict.fromkeys([*flag_gems.IMPLS, *vllm.IMPLS])])")
[ ${#files[@]} -gt 0 ] || { echo "cannot list the FlagGems and vLLM adapters with $PY"; exit 2; }
"$PY" -m pytest -q -p no:cacheprovider -n "${WORKERS:-2}" --device npu --compile-only \
    "${files[@]}" "${args[@]}" \
    --records-dir reports/runs/ecosystem-npu-compile --report-html none -rs "$@" >"$log" 2>&1
status=$?
grep -E "SKIPPED|passed|failed|compile|^[a-z_]+ +npu" "$log" | sort | uniq -c | sort -rn | head -30
exit $status
