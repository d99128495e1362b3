"""A single self-contained HTML page from conformance records.

    from attnsuite.records import read_records
    from attnsuite.report import render_report
    render_report(read_records(["reports/runs/cpu-..."]), "reports/index.html")

The page has inline CSS only: no scripts, no external resources. Data shaping lives in
``attnsuite.report.sections``; the template only iterates over what it returns.
"""
from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import jinja2

from attnsuite.records import merge_latest
from attnsuite.report.sections import build_context

__all__ = ["render_report", "render_html", "DEFAULT_TITLE"]

DEFAULT_TITLE = "Attention kernel conformance"
TEMPLATE = "index.html.j2"
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


def render_html(
    records: list[dict],
    *,
    title: str = DEFAULT_TITLE,
    generated_at: datetime | None = None,
) -> str:
    """The report page for these records (merged to the latest record per case/impl/device)."""
    records = list(records)
    merged = merge_latest(records)
    when = (generated_at or datetime.now(timezone.utc)).astimezone(timezone.utc)
    context = build_context(
        records, merged, title=title, generated_at=when.strftime("%Y-%m-%d %H:%M:%S UTC")
    )
    return _environment().get_template(TEMPLATE).render(**context)


def render_report(
    records: list[dict],
    out_path: str | os.PathLike,
    *,
    title: str = DEFAULT_TITLE,
) -> Path:
    """Merge the records, render the page and write it to ``out_path``; returns that path."""
    out = Path(out_path)
    page = render_html(records, title=title)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out)
    return out
