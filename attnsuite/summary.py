"""The few lines the terminal shows at the end of a run: outcomes and smallest headroom per
family and device (the same numbers as the report's matrix), then, when the run used several
devices or hosts, a line per device (the report's hosts-and-devices table)."""
from __future__ import annotations

from .records import merge_latest
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
            lines.append(f"{row['family']:<22} {cell['device']:<5} {counts}{headroom}")
    places = placement_rows(merged)
    if len(places) > 1:
        for p in places:
            counts = " · ".join(f"{c['count']} {c['outcome']}" for c in p["counts"]) or "no cases"
            bench = f" · {p['benchmarks']} benchmarks" if p["benchmarks"] else ""
            lines.append(f"{p['host']} {p['device']}: {counts}{bench}"
                         + (f"; case time {p['total']}" if p["total"] else ""))
    return lines
