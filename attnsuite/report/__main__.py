"""python -m attnsuite.report DIR_OR_JSONL [...] [-o reports/index.html] [--title TEXT]

Reads the records of every given run directory or .jsonl file, keeps the latest record per
(case, implementation, device, mode), and writes one self-contained HTML page. Exits 2 when
there is nothing to report or a path does not exist; test failures in the records, and records
it cannot use (which it counts and names), do not change the exit status.
"""
from __future__ import annotations

import argparse
import sys

from attnsuite.report import DEFAULT_TITLE, render_report
from attnsuite.report.bench_records import is_bench
from attnsuite.report.load import load, merge
from attnsuite.report.sections import counts_summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attnsuite.report",
        description="Render conformance records (run directories or .jsonl files) as one HTML page.",
    )
    parser.add_argument("paths", nargs="+", metavar="DIR_OR_JSONL",
                        help="run directories (searched recursively for *.jsonl) or .jsonl files")
    parser.add_argument("-o", "--output", default="reports/index.html",
                        help="where to write the page (default: %(default)s)")
    parser.add_argument("--title", default=DEFAULT_TITLE, help="page title")
    args = parser.parse_args(argv)

    try:
        loaded = load(args.paths)
    except (FileNotFoundError, NotADirectoryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not loaded.records:
        why = "; ".join(f"{n} × {reason}" for reason, n in sorted(loaded.skipped.items()))
        print(f"error: no records found in {', '.join(args.paths)} "
              f"(expected *.jsonl files with records){': skipped ' + why if why else ''}", file=sys.stderr)
        return 2

    out = render_report(loaded.records, args.output, title=args.title, run_status=loaded.statuses,
                        skipped=loaded.skipped)
    merged = merge(loaded.records)
    print(out)
    cases = [r for r in merged if not is_bench(r)]
    benches = [r for r in merged if is_bench(r)]
    line = f"{len(cases)} cases ({len(loaded.records)} records read): {counts_summary(cases)}"
    if benches:
        line += f"; {len(benches)} benchmarks: {counts_summary(benches)}"
    print(line)
    if loaded.skipped:
        print("skipped: " + "; ".join(f"{n} × {reason}" for reason, n in sorted(loaded.skipped.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
