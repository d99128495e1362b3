#!/usr/bin/env bash
# Every implementation of one family side by side, on a lent CUDA machine, from the repository
# root (one H100: a few minutes for decode's quick profile):
#
#     FAMILY=decode OUT=/tmp/side-by-side bash scripts/side_by_side.sh
#
# Runs every registered implementation of FAMILY (--impl FAMILY=all: ours, the vendor ops and
# every library adapter, installed or not) over FAMILY's quick conformance cases, then times each
# one on FAMILY's bench cases beside the baselines, and renders one report of both. Prints the
# suite's summary (a line per implementation; one line per library that does not import here),
# then the report's side-by-side table as text: per implementation the library and version,
# pass / fail / unsupported counts and the first failure with its repro command and script, then
# the device time per bench case (each over ours). Writes $OUT/records, $OUT/bench, $OUT/index.html and the
# repro scripts under $OUT/repro. Exit status: the conformance run's (1 when a case failed).
set -u
OUT=${OUT:-/tmp/attnsuite-side-by-side}
PY=${PYTHON:-python}
FAMILY=${FAMILY:-decode}
PROFILE=${PROFILE:-quick}
DEVICE=${DEVICE:-cuda}
K=${K:-}   # an extra -k expression for the conformance cases (a subset)
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
gpus=$($PY -c "import torch; print(max(1, torch.cuda.device_count()) if '$DEVICE' == 'cuda' else 2)")
# The family's own file only: -k on the family name would also pick e.g. paged_decode.
$PY -m pytest -q -p no:cacheprovider -n "$gpus" --device "$DEVICE" --profile "$PROFILE" ${K:+-k "$K"} \
    --impl "$FAMILY=all" "cases/$FAMILY.py" --records-dir="$OUT/records" --report-html "$OUT/index.html"
rc=$?
# Bench ids read test_bench[<family>[...]@<impl>]: keep FAMILY's, leave out the families whose
# names contain it (decode's is part of several others').
others=$($PY -c "
from attnsuite.registry import families
print(''.join(f' and not {f}' for f in families() if '$FAMILY' in f and f != '$FAMILY'))")
$PY -m pytest -q -p no:cacheprovider --device "$DEVICE" --profile quick --impl "$FAMILY=all" \
    benchmarks/test_bench.py -k "$FAMILY$others" --records-dir="$OUT/bench" --report-html none | tail -20
$PY -m attnsuite.report "$OUT/records" "$OUT/bench" -o "$OUT/index.html"
$PY - "$OUT/index.html" <<'PY'
import html, re, sys
page = open(sys.argv[1]).read()
start = page.find('<section id="side-by-side">')
if start < 0:
    sys.exit("no side-by-side section: fewer than two implementations ran")
body = page[start:page.index("</section>", start)]
for row in re.findall(r"<tr.*?</tr>", body, re.S):
    cells = [html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", c))).strip()
             for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
    print(" | ".join(cells))
PY
exit $rc
