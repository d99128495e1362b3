"""The few lines the terminal shows at the end of a run: outcomes and smallest headroom per
family and device (the same numbers as the report's matrix)."""
from __future__ import annotations

from .records import merge_latest
from .report.sections import family_device_matrix


def summary_lines(records: list[dict]) -> list[str]:
    matrix = family_device_matrix(merge_latest(records))
    lines = []
    for row in matrix["rows"]:
        for cell in row["cells"]:
            if cell["empty"]:
                continue
            counts = " · ".join(f"{c['count']} {c['outcome']}" for c in cell["counts"])
            numeric = not cell["device"].endswith(" compile")  # compile-only has no errors to bound
            headroom = f"; smallest passing headroom {cell['min_headroom']}" if numeric else ""
            lines.append(f"{row['family']:<22} {cell['device']:<5} {counts}{headroom}")
    return lines
