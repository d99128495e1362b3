"""The side-by-side section: for each family that ran more than one implementation
(``--impl FAMILY=all``), a row per implementation and device: the library and its version
behind it, outcome counts (pass, fail, unsupported, the rest), its first failure with the
command and the stand-alone script that reproduce it, and beneath, the device time of every
implementation on the family's bench cases beside the baselines timed with them.

Records in (merged), plain dicts out. "Unsupported" is a skip the implementation asked for
(``Unsupported``; records carry its reason in ``unsupported``, older ones only in the message),
kept apart from skips the catalog makes for every implementation.
"""
from __future__ import annotations

import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable

from attnsuite.report.bench_records import (
    baseline_label,
    baseline_median,
    baselines_present,
    device_stats,
    is_bench,
    kernel_entry,
    kernel_median,
)
from attnsuite.report.fields import MISSING, mapping, text, unique_anchors
from attnsuite.report.fmt import fmt_median_iqr, fmt_speedup
from attnsuite.report.rows import (
    NO_IMPL,
    case_anchor,
    column,
    is_bad,
    message_view,
    outcome,
    outcome_class,
)
from attnsuite.report.sections import filter_href

#: Our own implementation's registered name: listed first, and what the others are timed against.
OURS = "triton"
#: The counts every row shows, in this order; any other outcome follows in "other".
SHOWN = ("pass", "fail", "unsupported")


def is_unsupported(rec: dict) -> bool:
    if outcome(rec) != "skip":
        return False
    return bool(rec.get("unsupported")) or "does not support this case" in text(rec.get("message"))


def kind(rec: dict) -> str:
    """The outcome as this table counts it: ``unsupported`` apart from other skips."""
    return "unsupported" if is_unsupported(rec) else outcome(rec)


def _impl(rec: dict) -> str:
    return text(rec.get("impl")) or NO_IMPL


def impl_order(impls: Iterable[str]) -> list[str]:
    return sorted(set(impls), key=lambda name: (name != OURS, name))


def library_view(records: list[dict]) -> dict:
    """What the implementation calls: a library with its installed version, the version its
    adapter was written against, whether that has run on a GPU, and an import error if any."""
    lib = next((r["library"] for r in records if isinstance(r.get("library"), dict)), None)
    if lib is None:
        return {"name": MISSING, "version": MISSING, "title": "no library adapter (ours, a vendor op or "
                "a user's callable)", "import_error": "", "gpu_tested": None}
    lib = mapping(lib)
    written = text(lib.get("written_against"))
    version = text(lib.get("version")) or "not installed"
    title = f"{text(lib.get('distribution'))} {version}; adapter written against {written or '?'}"
    if lib.get("gpu_tested") is False:
        title += "; this adapter has not yet run on a GPU"
    return {"name": text(lib.get("name")) or MISSING, "version": version, "written_against": written,
            "title": title, "import_error": text(lib.get("import_error")),
            "gpu_tested": lib.get("gpu_tested") if isinstance(lib.get("gpu_tested"), bool) else None}


def script_href(path: str, base_dir: str | os.PathLike | None) -> str:
    """A link to a repro script from the page: relative to the page's directory when known."""
    if not path:
        return ""
    if base_dir is None:
        return Path(path).as_uri() if Path(path).is_absolute() else path
    try:
        return Path(os.path.relpath(path, base_dir)).as_posix()
    except ValueError:  # another drive (Windows)
        return Path(path).as_uri()


def first_failure(records: list[dict], base_dir) -> dict | None:
    bad = sorted((r for r in records if is_bad(r)), key=lambda r: text(r.get("case_id")))
    if not bad:
        return None
    # The first by case id, preferring one with a stand-alone script (a few per library are written).
    r = next((r for r in bad if r.get("repro_script")), bad[0])
    script = text(r.get("repro_script"))
    return {"case_id": text(r.get("case_id")), "anchor": case_anchor(r), "outcome": outcome(r),
            "outcome_class": outcome_class(outcome(r)), "message": message_view(r.get("message")),
            "repro": text(r.get("repro")), "script": script, "script_href": script_href(script, base_dir),
            "script_run": f"python '{script}'" if script else "",
            "script_error": text(r.get("repro_script_error"))}


def impl_row(family: str, impl: str, device: str, records: list[dict], base_dir) -> dict:
    counts = Counter(kind(r) for r in records)
    other = [{"outcome": o, "count": n, "class": outcome_class(o)} for o, n in sorted(counts.items())
             if o not in SHOWN]
    reasons = Counter(text(r.get("unsupported")) for r in records if is_unsupported(r) and r.get("unsupported"))
    return {
        "impl": impl, "device": device, "ours": impl == OURS,
        "filters": {"family": family, "impl": impl},
        "href": filter_href(family=family, impl=impl),
        "library": library_view(records),
        "counts": {o: counts.get(o, 0) for o in SHOWN},
        "other": other,
        "total": len(records),
        "bad": any(is_bad(r) for r in records),
        "unsupported_reasons": [{"reason": why, "count": n} for why, n in reasons.most_common(3)],
        "first_failure": first_failure(records, base_dir),
    }


def bench_view(family_bench: list[dict], impls: list[str]) -> dict | None:
    """Device time per bench case: a column per implementation that was timed (its ratio to
    ours beside it), then the baselines timed with the cases."""
    if not family_bench:
        return None
    by_case: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in family_bench:
        by_case[(text(r.get("case_id")), text(r.get("device")))][_impl(r)] = r
    timed = [i for i in impl_order({_impl(r) for r in family_bench}) if i in impls or not impls]
    baselines = baselines_present(family_bench)
    rows = []
    for (case_id, device), recs in sorted(by_case.items()):
        ours = recs.get(OURS)
        ours_ms = kernel_median(ours) if ours else None
        cells = []
        for impl in timed:
            rec = recs.get(impl)
            ms = kernel_median(rec) if rec else None
            ratio = ms / ours_ms if ms and ours_ms and impl != OURS else None
            cells.append({"impl": impl, "median": fmt_median_iqr(device_stats(kernel_entry(rec))) if rec else MISSING,
                          "ratio": fmt_speedup(ratio) if ratio else "", "outcome": outcome(rec) if rec else ""})
        anyrec = ours or next(iter(recs.values()))
        base_cells = []
        for name in baselines:
            ms = baseline_median(anyrec, name)
            entry = mapping(mapping(mapping(anyrec.get("bench")).get("baselines")).get(name))
            base_cells.append({"median": fmt_median_iqr(device_stats(entry)) if ms else
                               ("n/a" if "unavailable" in entry else MISSING),
                               "ratio": fmt_speedup(ms / ours_ms) if ms and ours_ms else ""})
        if any(c["median"] != MISSING for c in cells):  # a case nobody timed (skipped on cpu): no row
            rows.append({"case_id": case_id, "device": device, "anchor": case_anchor(anyrec),
                         "impls": cells, "baselines": base_cells})
    if not rows:
        return None
    return {"impls": timed, "baselines": [baseline_label(n) for n in baselines], "rows": rows}


def side_by_side(records: list[dict], base_dir: str | os.PathLike | None = None) -> list[dict]:
    """One block per family that ran several implementations (conformance records)."""
    cases: dict[str, list] = defaultdict(list)
    benches: dict[str, list] = defaultdict(list)
    for r in records:
        (benches if is_bench(r) else cases)[text(r.get("family"))].append(r)
    anchors = unique_anchors(cases, "side-")
    blocks = []
    for family in sorted(cases):
        impls = impl_order(_impl(r) for r in cases[family])
        if len(impls) < 2:
            continue
        by_row: dict[tuple, list] = defaultdict(list)
        for r in cases[family]:
            by_row[(_impl(r), column(r))].append(r)
        rows = [impl_row(family, impl, device, by_row[(impl, device)], base_dir)
                for impl in impls for device in sorted({d for i, d in by_row if i == impl})]
        blocks.append({"family": family, "anchor": anchors[family], "rows": rows,
                       "bench": bench_view(benches.get(family, []), impls)})
    return blocks

