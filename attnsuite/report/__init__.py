"""A single self-contained HTML page from conformance records.

    from attnsuite.report import render_runs
    render_runs(["reports/runs/cpu-..."], "reports/index.html")

or, with records already in hand, ``render_report(records, path, run_status=...)``. The page
has inline CSS and one inline script (the filter bar), no external resources, and a content
security policy that forbids any network request. Modules, one job each: ``load`` (tolerant
reading), ``fields``/``fmt`` (field access, number formatting), ``rows`` (one record as shown),
``sections``/``timing``/``hazards`` (conformance sections), ``bench_*`` and ``svg``
(benchmarks and charts), ``context`` (everything the template needs).
"""
from __future__ import annotations

import base64
import hashlib
import os
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

import jinja2
from markupsafe import Markup

from attnsuite.report.context import build_context
from attnsuite.report.load import Loaded, clean, load, merge

__all__ = ["render_report", "render_html", "render_runs", "DEFAULT_TITLE"]

DEFAULT_TITLE = "Attention kernel conformance"
TEMPLATE = "index.html.j2"
SCRIPT = "report.js"
_TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_TEMPLATES_DIR)),
        autoescape=True,  # every value, in every template, whatever its file name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _script_and_policy() -> tuple[Markup, str]:
    """The page's script and a content security policy that lets exactly that script run:
    record text can never become a running script, and nothing is ever fetched."""
    script = (_TEMPLATES_DIR / SCRIPT).read_text(encoding="utf-8")
    if "</" in script:  # it is inlined verbatim: it must not be able to close its own tag
        raise ValueError(f"{SCRIPT} must not contain '</'")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    policy = (f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{digest}'; "
              f"img-src data:; base-uri 'none'; form-action 'none'")
    # The policy is this module's own text (no record data, no double quote): written as is,
    # so its quotes read the same in the page as in this source.
    return Markup(script), Markup(policy)


def render_html(
    records: Iterable,
    *,
    title: str = DEFAULT_TITLE,
    generated_at: datetime | None = None,
    run_status: Iterable[dict] = (),
    skipped: Counter | None = None,
    base_dir: str | os.PathLike | None = None,
) -> str:
    """The report page for these records (merged to the latest record per case, implementation,
    device and mode). Records that cannot be shown are counted on the page, never raised.
    ``base_dir``: the directory the page will be in (its links to repro scripts are relative)."""
    usable, dropped = clean(records)
    merged = merge(usable)
    when = (generated_at or datetime.now(timezone.utc)).astimezone(timezone.utc)
    context = build_context(usable, merged, title=title,
                            generated_at=when.strftime("%Y-%m-%d %H:%M:%S UTC"),
                            run_status=list(run_status), skipped=Counter(skipped or {}) + dropped,
                            base_dir=base_dir)
    script, policy = _script_and_policy()
    return _environment().get_template(TEMPLATE).render(**context, script=script, csp=policy)


def _write(page: str, out_path: str | os.PathLike) -> Path:
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out)
    return out


def render_report(
    records: Iterable,
    out_path: str | os.PathLike,
    *,
    title: str = DEFAULT_TITLE,
    run_status: Iterable[dict] = (),
    skipped: Counter | None = None,
) -> Path:
    """Merge the records, render the page and write it to ``out_path``; returns that path."""
    page = render_html(records, title=title, run_status=run_status, skipped=skipped,
                       base_dir=Path(out_path).resolve().parent)
    return _write(page, out_path)


def render_runs(paths: Iterable[str | os.PathLike], out_path: str | os.PathLike, *,
                title: str = DEFAULT_TITLE) -> tuple[Path, Loaded]:
    """Read run directories or .jsonl files (records and each run's ``run.json``) and write the
    page; returns its path and what was read. Raises FileNotFoundError for a path that does
    not exist; anything odd inside the runs is shown on the page instead."""
    loaded = load(paths)
    page = render_html(loaded.records, title=title, run_status=loaded.statuses, skipped=loaded.skipped,
                       base_dir=Path(out_path).resolve().parent)
    return _write(page, out_path), loaded
