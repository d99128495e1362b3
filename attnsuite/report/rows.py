"""One record as the report shows it: outcome vocabulary, its anchor and filter keys, its
parameters, messages, compile results and hazards, phases. Plain data out, no HTML.

Sections (``sections``, ``timing``, ``hazards``, the benchmark tables) build their tables from
these views, so a record reads the same wherever it appears and every summary figure can link
to the row of its case (``case_anchor``).
"""
from __future__ import annotations

import hashlib
import math
from typing import Any, Iterable

from attnsuite.records import OUTCOMES as RECORD_OUTCOMES
from attnsuite.report.fields import MISSING, listing, mapping, num, slug, text
from attnsuite.report.fmt import fmt_bytes, fmt_duration, fmt_num, fmt_value

#: Every outcome the report knows, in display order. Records schema 2 adds "oom" and
#: "not_run"; they are listed here too so a report still reads them next to an older harness.
OUTCOMES = tuple(RECORD_OUTCOMES) + tuple(o for o in ("oom", "not_run") if o not in RECORD_OUTCOMES)
#: Outcomes that mean "the implementation is wrong here": red, listed first (an xpass only when
#: strict: ``is_bad``).
BAD_OUTCOMES = ("fail", "error", "crash", "timeout", "xpass")
#: Outcomes that say nothing about the implementation but leave a case unanswered
#: (out of device memory; never ran): amber, listed after the bad ones.
WARN_OUTCOMES = ("oom", "not_run")
#: Messages longer than this (or with more than one line) are folded.
LONG_MESSAGE_CHARS = 120
#: The filter dimensions, in the order the filter bar shows them.
FILTER_DIMS = ("family", "device", "impl", "outcome", "mode")

#: The implementation name of a record that has none (a case skipped before one was chosen).
NO_IMPL = "(none)"

PHASES = ("inputs", "first_call", "impl", "reference", "compare")
PHASE_LABELS = {"inputs": "inputs", "first_call": "first call (compile)", "impl": "implementation",
                "reference": "reference", "compare": "comparison"}


def outcome(rec: dict) -> str:
    return text(rec.get("outcome")) or "?"


def outcome_class(name: str) -> str:
    """CSS class suffix for an outcome; anything outside the known ones shares one class."""
    return name if name in OUTCOMES else "other"


def is_strict_xpass(rec: dict) -> bool:
    """A pass of a strict known failure: a stale ledger entry, which fails the run. A non-strict
    one (an entry that only explains a failure where it happens) is a pass and fails nothing."""
    return outcome(rec) == "xpass" and "XPASS(strict)" in text(rec.get("message"))


def is_bad(rec: dict) -> bool:
    """Whether the record fails its run (so the page colours it red): the exit status and the
    colours agree."""
    name = outcome(rec)
    return name in BAD_OUTCOMES and (name != "xpass" or is_strict_xpass(rec))


def is_warn(rec: dict) -> bool:
    return outcome(rec) in WARN_OUTCOMES


def mode(rec: dict) -> str:
    return text(rec.get("mode")) or "numeric"


def column(rec: dict) -> str:
    """The report column of a record: its device, marked when it is a compile-only record."""
    device = text(rec.get("device"))
    return f"{device} compile" if mode(rec) == "compile" else device


def case_anchor(rec: dict) -> str:
    """The fragment id of a record's row: readable, and unique per (case, impl, device, mode)
    whichever section links to it."""
    key = (text(rec.get("case_id")), text(rec.get("impl")), text(rec.get("device")), mode(rec))
    digest = hashlib.sha1(repr(key).encode()).hexdigest()[:8]
    return f"case-{slug(key[0])[:80]}-{digest}"


def filter_attrs(rec: dict) -> dict[str, str]:
    """The values the filter bar matches a row on (``data-<dim>`` attributes)."""
    return {"family": text(rec.get("family")), "device": text(rec.get("device")),
            "impl": text(rec.get("impl")) or NO_IMPL, "outcome": outcome(rec), "mode": mode(rec)}


def sort_key(rec: dict) -> tuple:
    """Bad outcomes first, then amber ones, then the rest, each by case id."""
    rank = 0 if is_bad(rec) else 1 if is_warn(rec) else 2
    return (rank, text(rec.get("case_id")), text(rec.get("impl")), column(rec))


# --------------------------------------------------------------------------- numbers


def record_headroom(rec: dict) -> float | None:
    """The record's headroom, or the smallest per-output headroom when the record has none."""
    h = num(rec.get("headroom"))
    if h is not None:
        return h
    per_output = [num(mapping(m).get("headroom")) for m in mapping(rec.get("metrics")).values()]
    per_output = [x for x in per_output if x is not None and not math.isnan(x)]
    return min(per_output) if per_output else None


def output_metrics(rec: dict) -> list[dict]:
    """One entry per checked output (o, lse, ...) with its error, allowance and headroom."""
    rows = []
    for name, m in mapping(rec.get("metrics")).items():
        m = mapping(m)
        rows.append({"name": text(name), "max_abs_err": fmt_num(m.get("max_abs_err")),
                     "allowed": fmt_num(m.get("allowed")), "headroom": fmt_num(m.get("headroom"))})
    return rows


def case_seconds(rec: dict) -> float | None:
    """How long a case took: its duration, or for a crash or timeout how long it had been
    running (``elapsed_s``) when that is longer than what pytest measured."""
    values = [num(rec.get("duration_s")), num(rec.get("elapsed_s"))]
    values = [v for v in values if v is not None and math.isfinite(v) and v >= 0]
    return max(values) if values else None


def phases(rec: dict) -> dict[str, float]:
    """Seconds per phase of a numeric case, known phases in order, then any others."""
    raw = mapping(rec.get("phases"))
    out = {}
    for name in list(PHASES) + sorted(k for k in map(text, raw) if k not in PHASES):
        value = num(raw.get(name))
        if value is not None and math.isfinite(value) and value >= 0:
            out[name] = value
    return out


# --------------------------------------------------------------------------- text


def message_view(value: Any) -> dict:
    """The message split for display: its first line, the full text, and whether it is long."""
    body = text(value).rstrip()
    lines = body.splitlines()
    first = lines[0] if lines else ""
    long = len(lines) > 1 or len(body) > LONG_MESSAGE_CHARS
    if long and len(first) > LONG_MESSAGE_CHARS:
        first = first[:LONG_MESSAGE_CHARS] + "…"
    return {"text": body, "first_line": first, "long": long}


def known_anchor(entry_id: str) -> str:
    """The page's own section on a known failure (``known``: the notes are put in the page)."""
    return f"kf-{slug(entry_id)}"


def known_failure_view(value: Any) -> dict | None:
    kf = mapping(value)
    if not kf:
        return None
    entry_id = text(kf.get("id")) or "known"
    return {
        "id": entry_id,
        "reason": text(kf.get("reason")),
        "versions": text(kf.get("versions")),
        "note_href": f"#{known_anchor(entry_id)}",
    }


# --------------------------------------------------------------------------- parameters


def param_text(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return fmt_value(value, 4)
    if isinstance(value, (list, tuple)):
        return ",".join(param_text(v) for v in value)
    if isinstance(value, dict):
        return " ".join(f"{k}={param_text(v)}" for k, v in value.items())
    return MISSING if value is None else text(value)


def param_columns(records: Iterable[dict]) -> tuple[list[str], list[dict]]:
    """The parameters that vary across these records (one column each, in first-seen order)
    and those every record shares (said once above the table instead)."""
    records = list(records)
    seen: dict[str, set] = {}
    present: dict[str, int] = {}
    for r in records:
        for key, value in mapping(r.get("params")).items():
            key = text(key)
            seen.setdefault(key, set()).add(param_text(value))
            present[key] = present.get(key, 0) + 1
    varying = [k for k in seen if len(seen[k]) > 1 or present[k] < len(records)]
    constant = [{"name": k, "value": next(iter(seen[k]))} for k in seen
                if k not in varying and seen[k] != {MISSING}]
    return varying, constant


# --------------------------------------------------------------------------- compile-only


def _hazards(links: list[dict]) -> dict:
    """The npu hazards of one target's launches, worst first: grid imbalance, on-chip buffer
    use, and element-wise memory accesses (a count and the source lines)."""
    grid = [mapping(mapping(x.get("hazards")).get("grid")) for x in links]
    grid = [g for g in grid if g]
    ub = [mapping(mapping(x.get("hazards")).get("ub")) for x in links]
    ub = [u for u in ub if u]
    acc = [mapping(mapping(x.get("hazards")).get("accesses")) for x in links]
    scalar = sum(int(num(a.get("scalar")) or 0) for a in acc)
    gather = sum(int(num(a.get("row_gather")) or 0) for a in acc)
    sites = [mapping(s) for a in acc for s in listing(a.get("sites"))]
    if not any(a for a in acc):  # records from before schema 2: the adapter's count only
        scalar = sum(int(num(x.get("scalar_accesses")) or 0) for x in links)
        sites = [{"kind": "scalar", "line": text(line), "count": None}
                 for x in links for line in listing(x.get("scalar_summary"))]
    out: dict[str, Any] = {"scalar": scalar, "row_gather": gather,
                           "sites": [{"kind": text(s.get("kind")), "line": text(s.get("line")),
                                      "count": fmt_num(s.get("count")) if s.get("count") is not None else ""}
                                     for s in sites],
                           "grid": None, "ub": None}
    if grid:
        worst = max(grid, key=lambda g: (bool(g.get("flagged")), -(num(g.get("ratio")) or 0)))
        ratio = num(worst.get("ratio"))
        out["grid"] = {"flagged": any(g.get("flagged") is True for g in grid),
                       "text": f"{fmt_num(worst.get('programs'))} programs / "
                               f"{fmt_num(worst.get('ai_cores'))} AI cores"
                               + (f" ({fmt_value(ratio)}×)" if ratio is not None else "")}
    if ub:
        worst = max(ub, key=lambda u: num(u.get("percent")) or 0)
        out["ub"] = {"flagged": any(u.get("flagged") is True for u in ub),
                     "text": f"UB {fmt_num(worst.get('percent'))}% "
                             f"({fmt_bytes(worst.get('bytes'))} of {fmt_bytes(worst.get('capacity'))})"}
    out["flagged"] = bool((out["grid"] or {}).get("flagged") or (out["ub"] or {}).get("flagged")
                          or scalar or gather)
    return out


def compile_view(rec: dict) -> list[dict]:
    """Per compile target: did every launch compile, where the first failure stopped, and the
    target's performance hazards (never failures)."""
    views = []
    for target, links in mapping(rec.get("compile")).items():
        links = [mapping(x) for x in listing(links)]
        failed = [x for x in links if x.get("outcome") != "pass"]
        result = "fail" if failed else "pass"
        views.append({"target": text(target), "outcome": result, "class": outcome_class(result),
                      "stage": text(failed[0].get("stage")) if failed else "", **_hazards(links)})
    return views


# --------------------------------------------------------------------------- the row


def case_row(rec: dict, param_keys: Iterable[str] = ()) -> dict:
    """Everything the per-case tables show for one record, as display strings."""
    name = outcome(rec)
    metrics = output_metrics(rec)
    params = mapping(rec.get("params"))
    seconds = case_seconds(rec)
    elapsed = num(rec.get("elapsed_s"))
    case_id = text(rec.get("case_id"))
    family = text(rec.get("family"))
    return {
        "case_id": case_id,
        # Under its family's heading a case is named by its label alone.
        "label": case_id[len(family):] if family and case_id.startswith(family + "[") else case_id,
        "anchor": case_anchor(rec),
        "filters": filter_attrs(rec),
        "nodeid": text(rec.get("nodeid")),
        "impl": text(rec.get("impl")),
        "device": column(rec),
        "device_index": text(rec.get("device_index")),
        "params": [param_text(params[k]) if k in params else MISSING for k in param_keys],
        "compiles": compile_view(rec),
        "dtype": text(rec.get("dtype")),
        "run_id": text(rec.get("run_id")),
        "outcome": name,
        "outcome_class": outcome_class(name),
        "bad": is_bad(rec),
        "warn": is_warn(rec),
        "stage": text(rec.get("stage")),
        "metrics": metrics,
        "show_metric_names": len(metrics) > 1,
        "headroom": fmt_num(record_headroom(rec)),
        "duration": fmt_duration(seconds),
        "elapsed": fmt_duration(elapsed) if elapsed is not None else "",
        "phases": [{"name": PHASE_LABELS.get(k, k), "seconds": fmt_duration(v)}
                   for k, v in phases(rec).items()],
        "message": message_view(rec.get("message")),
        "known_failure": known_failure_view(rec.get("known_failure")),
        "repro": text(rec.get("repro")),
        "library": library_text(rec),
        # A library failure's stand-alone reproduction (attnsuite/repro_script.py), as a command.
        "repro_script": f"python '{text(rec.get('repro_script'))}'" if rec.get("repro_script") else "",
    }


def library_text(rec: dict) -> str:
    """"FakeLib 1.2.3 (adapter written against 1.2.0)" for a library's implementation, else ""."""
    lib = mapping(rec.get("library"))
    if not lib:
        return ""
    version = text(lib.get("version")) or "not installed"
    return f"{text(lib.get('name'))} {version} (adapter written against {text(lib.get('written_against')) or '?'})"
