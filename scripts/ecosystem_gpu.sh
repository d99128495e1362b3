#!/usr/bin/env bash
# Other libraries' attention kernels (the ecosystem adapters, attnsuite/ecosystem) over the full
# profile on a CUDA machine, beside ours (from the repository root, torch + triton installed, e.g.
# the lent H100 with torch 2.11 / triton 3.6):
#
#   bash scripts/ecosystem_gpu.sh [FAMILY ...]          # default: every family with an adapter
#
# Environment: WORKERS (xdist workers, default 4), FG_WHEEL (FlagGems wheel, default
# .wheels/flag_gems-5.0.2-py3-none-any.whl: carry it to the machine), FG_DIR (where it is
# installed with --no-deps, default /tmp/attnsuite-flag-gems), OURS=0 to leave our triton
# kernels out, IMPLS_<family>="name ..." to choose a family's adapters (default: every adapter
# the ecosystem registry has for it; one whose library is not installed says so, case by case),
# PYTEST_ARGS for more.
# One pytest run per family, and one more for flex (FLEX_PROFILE, default PROFILE: it compiles
# per case shape, ~1,400 full-profile cases over the five families); time the first family before
# planning the rest against a 10-minute slot.
# Records: reports/runs/ecosystem-$DEVICE-<family>; page: reports/ecosystem.html (all families).
# What it prints: FlagGems' import status (an import failure is reported once, its cases
# are then unsupported), then per family pytest's summary and the suite's table.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
W=${WORKERS:-4}
DEVICE=${DEVICE:-cuda}      # DEVICE=cpu PROFILE=quick: a dry run of this script without a GPU
PROFILE=${PROFILE:-full}
FG_WHEEL=${FG_WHEEL:-.wheels/flag_gems-5.0.2-py3-none-any.whl}
FG_DIR=${FG_DIR:-/tmp/attnsuite-flag-gems}

if [ -f "$FG_WHEEL" ]; then
  "$PY" -m pip install -q --upgrade --no-deps --target "$FG_DIR" "$FG_WHEEL" || echo "FlagGems: pip install failed"
  export PYTHONPATH="$FG_DIR:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  echo "FlagGems: no wheel at $FG_WHEEL (its cases will be unsupported: not installed)"
fi
# FlagGems 5.0.2 imports PyYAML at import time (a pinned dependency --no-deps leaves out): from
# wheels carried in FG_DEPS (default .fg-deps: pyyaml 6.0.3 for cp310-cp312, sqlalchemy 2.0.48)
# when the machine's Python lacks it; nothing is downloaded.
FG_DEPS=${FG_DEPS:-.fg-deps}
if ! "$PY" -c "import yaml, sqlalchemy" 2>/dev/null && [ -d "$FG_DEPS" ]; then
  "$PY" -m pip install -q --upgrade --no-deps --no-index --find-links "$FG_DEPS" --target "$FG_DIR" pyyaml sqlalchemy \
    || echo "FlagGems: no PyYAML wheel for this Python in $FG_DEPS"
fi
"$PY" - <<'PY'
try:
    import flag_gems
    print("FlagGems imports:", getattr(flag_gems, "__version__", "?"), flag_gems.__file__)
except Exception as exc:
    print(f"FlagGems does not import: {type(exc).__name__}: {exc}")
import torch, triton
print("torch", torch.__version__, "triton", triton.__version__,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device")
PY

# Each family with adapters, and their names: "family name ...", from the ecosystem registry.
ADAPTERS=$("$PY" -c "
from attnsuite import registry
from attnsuite.ecosystem import implementations
for fam in registry.names():
    names = list(implementations(fam))
    if names:
        print(fam, *names)") || { echo "cannot list the ecosystem adapters with $PY"; exit 2; }
FAMILIES=${*:-$(cut -d' ' -f1 <<<"$ADAPTERS")}
run() {  # run FAMILY PROFILE RECORDS_SUFFIX --impl ...
  local fam=$1 profile=$2 suffix=$3; shift 3
  echo "== $fam ($profile): $*"
  "$PY" -m pytest -q -p no:cacheprovider --device "$DEVICE" --profile "$profile" -n "$W" "cases/$fam.py" "$@" \
      --records-dir "reports/runs/ecosystem-$DEVICE-$fam$suffix" --report-html none ${PYTEST_ARGS:-} 2>&1 | tail -25
}
for fam in $FAMILIES; do
  var="IMPLS_$fam"
  names=${!var:-$(grep "^$fam " <<<"$ADAPTERS" | cut -d' ' -f2-)}
  args=(); flex=0
  [ "${OURS:-1}" = 1 ] && args+=(--impl "$fam=triton")
  for n in $names; do
    if [ "$n" = flex ]; then flex=1; else args+=(--impl "$fam=$n"); fi
  done
  [ ${#args[@]} -gt 0 ] && run "$fam" "$PROFILE" "" "${args[@]}"
  # flex is torch.compile'd once per shape/dtype/mask kind (dynamic=False): seconds per case on
  # a GPU host, so it runs on its own (FLEX_PROFILE=quick for a short pass).
  [ $flex = 1 ] && run "$fam" "${FLEX_PROFILE:-$PROFILE}" "-flex" --impl "$fam=flex"
done
"$PY" -m attnsuite.report reports/runs/ecosystem-$DEVICE-* -o reports/ecosystem.html 2>&1 | tail -2
