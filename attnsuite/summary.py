"""The few lines the terminal shows at the end of a run: outcomes and smallest headroom per
family and device (the same numbers as the report's matrix; per implementation where a family ran
several), then, when the run used several devices or hosts, a line per device (the report's
hosts-and-devices table), then one line per library that could not be imported here (its cases
are all unsupported, attnsuite/ecosystem), however many cases and families that is, and one line
per compile target where a launch compiled only on a retry (attnsuite/compile/npu.py). With
--impl, a line names each implementation that ran and where it was imported from."""
from __future__ import annotations

from .context import ACCOUNT, SUITE
from .finish import report_written
from .records import merge_latest, read_records
from .report.placement import placement_rows
from .report.sections import family_device_matrix


def summary_lines(records: list[dict]) -> list[str]:
    merged = merge_latest(records)
    matrix = family_device_matrix(merged)
    lines = []
    for row in matrix["rows"]:
        for cell in row["cells"]:
            if cell["empty"]:
                continue
            counts = " · ".join(f"{c['count']} {c['outcome']}" for c in cell["counts"])
            numeric = not cell["device"].endswith(" compile")  # compile-only has no errors to bound
            headroom = f"; smallest passing headroom {cell['min_headroom']}" if numeric else ""
            name = f"{row['family']} {row['impl']}" if row["impl"] else row["family"]
            lines.append(f"{name:<22} {cell['device']:<5} {counts}{headroom}")
    places = placement_rows(merged)
    if len(places) > 1:
        for p in places:
            counts = " · ".join(f"{c['count']} {c['outcome']}" for c in p["counts"]) or "no cases"
            bench = f" · {p['benchmarks']} benchmarks" if p["benchmarks"] else ""
            lines.append(f"{p['host']} {p['device']}: {counts}{bench}"
                         + (f"; case time {p['total']}" if p["total"] else ""))
    return lines + broken_library_lines(merged) + retried_compile_lines(merged)


def retried_compile_lines(records: list[dict]) -> list[str]:
    """One line per target where launches passed only on a retry, with the first such case and
    its first failure: a nondeterministic compiler (porting_notes.md, adapter_use_after_free and
    bishengir_flaky) shows at the end of the run instead of passing unseen."""
    found: dict[str, list] = {}
    for r in records:
        for target, launches in (r.get("compile") or {}).items():
            for launch in launches if isinstance(launches, list) else []:
                if isinstance(launch, dict) and launch.get("flaky"):
                    found.setdefault(target, []).append((r["case_id"], launch))
    lines = []
    for target, hits in sorted(found.items()):
        case_id, launch = hits[0]
        first = (str(launch["flaky"]).strip().splitlines() or [""])[0]
        cases = len({c for c, _ in hits})
        lines.append(f"{target}: {len(hits)} launch{'es' if len(hits) != 1 else ''} in {cases} "
                     f"case{'s' if cases != 1 else ''} compiled only on a retry, first "
                     f"{case_id} ({launch.get('kernel')}): {first}")
    return lines


def broken_library_lines(records: list[dict]) -> list[str]:
    """One line per library whose import failed, with the error and the implementations whose
    cases it made unsupported."""
    broken: dict[tuple, dict] = {}
    for r in records:
        lib = r.get("library") or {}
        if isinstance(lib, dict) and lib.get("import_error"):
            entry = broken.setdefault((lib.get("name"), lib.get("import_error")), {"lib": lib, "impls": {}})
            impl = f"{r['family']}={r.get('impl')}"
            # Counted where the import error is what made the case unsupported (a benchmark on
            # cpu is skipped before the library is tried).
            entry["impls"][impl] = entry["impls"].get(impl, 0) + bool(r.get("unsupported"))
    lines = []
    for (name, error), entry in sorted(broken.items(), key=lambda kv: str(kv[0])):
        lib = entry["lib"]
        version = lib.get("version") or "not installed"
        impls = ", ".join(f"{impl} ({n} case{'s' if n != 1 else ''})" for impl, n in sorted(entry["impls"].items())
                          if n)
        lines.append(f"library {name} ({lib.get('distribution')} {version}) does not import here: {error}"
                     + (f"; unsupported: {impls}" if impls else ""))
    return lines


def terminal_summary(terminalreporter, config) -> None:
    """The ``attnsuite`` section at the end of the terminal output (the report thread awaited)."""
    report_written(config)
    s = config.stash.get(SUITE, None)
    if s is None or not s.options.run_dir.is_dir() or not any(s.options.run_dir.glob("*.jsonl")):
        return
    write = terminalreporter.write_line
    terminalreporter.section("attnsuite")
    account = config.stash.get(ACCOUNT, None)
    if account is not None and account.interrupted:
        write(f"INTERRUPTED ({account.interrupted}): the records and report hold what ran")
    for line in implementation_lines(s.implementations()) + summary_lines(read_records([s.options.run_dir])):
        write(line)
    if s.trace_summary:
        write(s.trace_summary)
    write(f"records: {s.options.run_dir}")
    if s.report_error:
        write(f"report NOT written ({s.report_error}); re-render with python -m attnsuite.report {s.options.run_dir}")
    elif s.options.report_path is not None:
        write(f"report: {s.options.report_path}  (merge runs: python -m attnsuite.report reports/runs/*)")


def implementation_lines(chosen: dict) -> list[str]:
    """One line per family that ran --impl implementations: each one's name and source file."""
    import inspect

    lines = []
    for family, impls in chosen.items():
        named = []
        for name, fn in impls:
            try:
                where = inspect.getsourcefile(getattr(fn, "fn", fn))
            except TypeError:  # a builtin, an object of methods
                where = None
            named.append(f"{name} ({where})" if where and where not in name else name)
        lines.append(f"implementation {family}: {', '.join(named)}")
    return lines
