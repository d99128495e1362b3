"""The HTML report: escaping, merging runs, the family x device matrix, the CLI, self-containment."""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # so the tests also run without an installed package
    sys.path.insert(0, str(REPO))

from attnsuite.records import read_records  # noqa: E402
from attnsuite.report import render_html, render_report  # noqa: E402
from attnsuite.report.sections import (  # noqa: E402
    case_groups,
    family_device_matrix,
    fmt_num,
    outcome_counts,
    tight_cases,
)

CASES = [
    "prefill[fp16-B2-Hq8-Hkv2-S17-D64-causal]",
    "prefill[bf16-B1-Hq4-Hkv4-S128-D128-full]",
    "prefill[fp32-B1-Hq2-Hkv1-S1-D32-causal]",
]


def make_record(case_id=CASES[0], *, device="cpu", outcome="pass", run_id=None,
                finished_at="2026-11-21T05:30:10+00:00", family=None, **extra) -> dict:
    family = family or case_id.split("[", 1)[0]
    run_id = run_id or f"{device}-20261121-053000"
    rec = {
        "schema": 1,
        "run_id": run_id,
        "case_id": case_id,
        "nodeid": f"cases/test_{family}.py::test_{family}[{case_id.split('[', 1)[-1]}",
        "family": family,
        "impl": "triton",
        "device": device,
        "device_index": 0,
        "worker": "gw0",
        "dtype": "fp16",
        "params": {"B": 2, "S": 17},
        "profile": "quick",
        "outcome": outcome,
        "stage": None if outcome == "pass" else "numeric",
        "message": None,
        "known_failure": None,
        "metrics": {"o": {"max_abs_err": 1e-3, "baseline_err": 5e-4, "allowed": 4e-3, "headroom": 4.0}},
        "headroom": 4.0,
        "tolerance": {"policy": "2x-baseline+floor", "factor": 2.0, "unit_roundoff": 4.9e-4, "floor": 1e-5},
        "duration_s": 0.25,
        "started_at": "2026-11-21T05:30:00+00:00",
        "finished_at": finished_at,
        "env": {"python": "3.11.7", "torch": f"2.13.0+{device}", "triton": "3.9.0",
                "triton_backend": "triton", "device_name": f"{device} device", "driver": "drv-1",
                "host": "host-a", "platform": "linux"},
        "repro": f"pytest 'cases/test_{family}.py::test_{family}[x]' --device {device} --profile quick",
    }
    rec.update(extra)
    return rec


def write_run(run_dir: Path, records: list[dict], worker="gw0") -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"{worker}.jsonl"
    with open(path, "a", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")
    return run_dir


class _Tables(HTMLParser):
    """Text of every cell of the table inside <section id=...>, row by row."""

    def __init__(self, section_id: str):
        super().__init__()
        self.section_id = section_id
        self.depth = 0  # >0 while inside the wanted section
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None
        self.cell_classes: list[list[str]] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            if self.depth or attrs.get("id") == self.section_id:
                self.depth += 1
        if not self.depth:
            return
        if tag == "tr":
            self.rows.append([])
            self.cell_classes.append([])
        elif tag in ("td", "th"):
            self.cell = []
            self.cell_classes[-1].append(attrs.get("class") or "")
        elif tag == "br" and self.cell is not None:
            self.cell.append(" ")

    def handle_endtag(self, tag):
        if not self.depth:
            return
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "section":
            self.depth -= 1

    def handle_data(self, data):
        if self.depth and self.cell is not None:
            self.cell.append(data)


def section_table(html: str, section_id: str) -> _Tables:
    parser = _Tables(section_id)
    parser.feed(html)
    assert parser.rows, f"no table in section {section_id}"
    return parser


# --------------------------------------------------------------------------- escaping


def test_script_in_message_is_escaped():
    evil = "<script>alert(1)</script>"
    recs = [
        make_record(CASES[0], outcome="fail", message=evil),
        make_record(CASES[1], outcome="fail", message=evil + "\n" + "compiler said: a < b && c > d\n" * 5),
        make_record(CASES[2], outcome="xfail", message="short",
                    known_failure={"id": "KF-1", "reason": evil, "versions": "<3.9"},
                    env={"host": evil, "device_name": "<b>gpu</b>"}),
    ]
    html = render_html(recs)
    assert "<script>alert" not in html
    assert "<script" not in html.lower()  # the page carries no script at all
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>gpu</b>" not in html and "&lt;b&gt;gpu&lt;/b&gt;" in html
    assert "a &lt; b &amp;&amp; c &gt; d" in html
    # The long message is folded into <details> with its first line as the summary.
    assert re.search(r"<details><summary>&lt;script&gt;alert\(1\)&lt;/script&gt;</summary><pre>", html)


def test_script_in_ids_and_names_is_escaped():
    evil = '"><script>alert(2)</script>'
    rec = make_record("prefill[" + evil + "]", outcome="error", family="pre<fill>" + evil,
                      impl=evil, stage=evil, run_id=evil, repro="pytest '" + evil + "'")
    html = render_html([rec], title=evil)
    assert "<script" not in html.lower()
    assert "&#34;&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in html  # quotes escaped: no attribute breakout
    assert "pre&lt;fill&gt;" in html
    # The family anchor is reduced to safe characters.
    assert re.search(r'id="family-pre-fill-script-alert-2-script"', html)


# --------------------------------------------------------------------------- merging


def test_two_run_dirs_give_side_by_side_device_columns(tmp_path):
    cpu = write_run(tmp_path / "runs" / "cpu-20261121-053000",
                    [make_record(c, device="cpu") for c in CASES])
    cuda = write_run(tmp_path / "runs" / "cuda-20261121-060000",
                     [make_record(c, device="cuda", run_id="cuda-20261121-060000") for c in CASES[:2]]
                     + [make_record(CASES[2], device="cuda", outcome="fail", run_id="cuda-20261121-060000")])
    records = read_records([cpu, cuda])
    html = render_html(records)

    matrix = family_device_matrix(records)
    assert matrix["devices"] == ["cpu", "cuda"]
    [row] = matrix["rows"]
    cpu_cell, cuda_cell = row["cells"]
    assert [(c["outcome"], c["count"]) for c in cpu_cell["counts"]] == [("pass", 3)]
    assert [(c["outcome"], c["count"]) for c in cuda_cell["counts"]] == [("pass", 2), ("fail", 1)]
    assert not cpu_cell["bad"] and cuda_cell["bad"]

    table = section_table(html, "matrix")
    assert table.rows[0] == ["Family", "cpu", "cuda"]
    assert table.rows[1][0] == "prefill"
    assert "3 pass" in table.rows[1][1] and "min headroom: 4" in table.rows[1][1]
    assert "2 pass" in table.rows[1][2] and "1 fail" in table.rows[1][2]
    assert table.cell_classes[1][1] == "" and table.cell_classes[1][2] == "bad"

    # Both runs in the header, both environments listed.
    assert "cpu-20261121-053000" in html and "cuda-20261121-060000" in html
    env = section_table(html, "environment")
    assert sorted(r[0] for r in env.rows[1:]) == ["cpu", "cuda"]


def test_later_record_for_the_same_key_wins():
    old = make_record(CASES[0], outcome="fail", message="old failure text",
                      finished_at="2026-11-21T05:30:10+00:00", run_id="cpu-old")
    new = make_record(CASES[0], outcome="pass", message=None,
                      finished_at="2026-11-21T07:00:00+00:00", run_id="cpu-new")
    for order in ([old, new], [new, old]):
        html = render_html(order)
        assert "old failure text" not in html
        cases = section_table(html, "cases")
        assert [(r[0], r[3]) for r in cases.rows[1:]] == [(CASES[0], "pass")]
    # Shaping functions see the same thing once merged.
    from attnsuite.records import merge_latest
    merged = merge_latest([new, old])
    assert [r["run_id"] for r in merged] == ["cpu-new"]
    assert {c["outcome"]: c["count"] for c in outcome_counts(merged)}["fail"] == 0
    # Both runs are listed as read, only the new one still shown.
    runs = section_table(render_html([old, new]), "runs")
    shown = {r[0]: r[4] for r in runs.rows[1:]}
    assert shown == {"cpu-new": "1", "cpu-old": "0"}


# --------------------------------------------------------------------------- page contents


def test_failures_first_then_by_case_id_and_tight_cases():
    recs = [
        make_record("prefill[c]", outcome="pass", headroom=1.1,
                    metrics={"o": {"max_abs_err": 1e-3, "allowed": 1.1e-3, "headroom": 1.1},
                             "lse": {"max_abs_err": 1e-5, "allowed": 1e-3, "headroom": 100.0}}),
        make_record("prefill[a]", outcome="pass", headroom=float("inf"),
                    metrics={"o": {"max_abs_err": 0.0, "allowed": 1e-3, "headroom": float("inf")}}),
        make_record("prefill[d]", outcome="crash", message="segfault"),
        make_record("prefill[b]", outcome="xfail"),
        make_record("prefill[e]", outcome="xpass"),
        make_record("prefill[f]", outcome="pass", headroom=1.2499),
    ]
    [group] = case_groups(recs)
    assert [r["case_id"] for r in group["rows"]] == [
        "prefill[d]", "prefill[e]", "prefill[a]", "prefill[b]", "prefill[c]", "prefill[f]"]
    assert [r["case_id"] for r in tight_cases(recs)] == ["prefill[c]", "prefill[f]"]

    html = render_html(recs)
    tight = section_table(html, "tight")
    assert [r[0] for r in tight.rows[1:]] == ["prefill[c]", "prefill[f]"]
    assert tight.rows[1][3] == "1.1" and tight.rows[2][3] == "1.25"
    cases = section_table(html, "cases")
    by_case = {r[0]: r for r in cases.rows[1:]}
    assert by_case["prefill[a]"][7] == "inf"
    assert by_case["prefill[c]"][5] == "o: 0.001 lse: 1e-05"
    # The matrix cell is red (crash, xpass); its min headroom ignores non-passes.
    matrix = family_device_matrix(recs)
    assert matrix["rows"][0]["cells"][0]["bad"]
    assert matrix["rows"][0]["cells"][0]["min_headroom"] == "1.1"


def test_minimal_records_render():
    """Only the required fields, or everything else null: no exception, dashes for numbers."""
    bare = {"schema": 1, "case_id": "decode[x]", "family": "decode", "device": "npu", "outcome": "timeout"}
    nulls = dict(make_record("decode[y]", device="npu"), **{
        k: None for k in ("run_id", "nodeid", "impl", "worker", "dtype", "params", "profile", "stage",
                          "message", "known_failure", "metrics", "headroom", "tolerance", "duration_s",
                          "started_at", "finished_at", "env", "repro")})
    weird = dict(make_record("decode[z]", device="npu"), metrics={"o": None, "lse": {"headroom": "inf"}},
                 headroom=None, env="not a dict", message=12345, duration_s="slow")
    html = render_html([bare, nulls, weird])
    cases = section_table(html, "cases")
    by_case = {r[0]: r for r in cases.rows[1:]}
    assert by_case["decode[x]"][3] == "timeout" and by_case["decode[x]"][7] == "—"
    assert by_case["decode[y]"][8] == "—" and by_case["decode[y]"][9] == "—"  # compiles, duration
    assert by_case["decode[z]"][7] == "inf"  # falls back to the per-output headroom
    assert "12345" in by_case["decode[z]"][10]


@pytest.mark.parametrize("value, text", [
    (None, "—"), ("n/a", "—"), (float("inf"), "inf"), (float("-inf"), "-inf"), (math.nan, "nan"),
    (0, "0"), (1.23456, "1.23"), (1234.5, "1.23e+03"), (0.000123456, "0.000123"), (4.0, "4"),
])
def test_fmt_num(value, text):
    assert fmt_num(value) == text


def test_page_is_self_contained(tmp_path):
    recs = [make_record(c, device=d, outcome=o, message="see docs")
            for c in CASES for d in ("cpu", "cuda") for o in ("pass",)]
    recs.append(make_record("decode[q]", outcome="fail", message="line1\nline2"))
    recs += [make_record("x[1]", family="paged decode"), make_record("x[2]", family="paged-decode")]
    out = render_report(recs, tmp_path / "sub" / "index.html")
    assert out == tmp_path / "sub" / "index.html"
    html = out.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html, re.I)
    assert "http://" not in html and "https://" not in html
    assert not re.search(r"<script\b", html, re.I)
    assert not re.search(r"<link\b", html, re.I)
    assert "@import" not in html and "url(" not in html
    assert not re.search(r"<(?:img|iframe|object|embed)\b", html, re.I)
    # Internal links from the matrix point at family sections that exist.
    anchors = re.findall(r'href="#([^"]+)"', html)
    assert len(anchors) == len(set(anchors)) == 4  # decode, paged decode, paged-decode, prefill
    for anchor in anchors:
        assert html.count(f'id="{anchor}"') == 1


# --------------------------------------------------------------------------- CLI


def run_cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "attnsuite.report", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_cli_end_to_end(tmp_path):
    cpu = write_run(tmp_path / "cpu-20261121-053000", [make_record(c, device="cpu") for c in CASES])
    write_run(cpu, [make_record(CASES[0], device="cpu", outcome="fail", message="<oops>",
                                finished_at="2026-11-21T06:00:00+00:00")], worker="gw1")
    cuda = write_run(tmp_path / "cuda-20261121-060000",
                     [make_record(c, device="cuda", outcome="xfail") for c in CASES])
    out = tmp_path / "out" / "out.html"
    res = run_cli(cpu, cuda, "-o", out)
    assert res.returncode == 0, res.stderr
    assert str(out) in res.stdout
    assert "6 cases (7 records read): 2 pass · 1 fail · 3 xfail" in res.stdout
    html = out.read_text(encoding="utf-8")
    table = section_table(html, "matrix")
    assert table.rows[0] == ["Family", "cpu", "cuda"]
    assert "&lt;oops&gt;" in html and "<oops>" not in html

    # A single .jsonl file works too.
    res = run_cli(cuda / "gw0.jsonl", "-o", tmp_path / "one.html")
    assert res.returncode == 0, res.stderr
    assert "3 xfail" in res.stdout


def test_cli_exits_2_without_records(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    res = run_cli(empty, "-o", tmp_path / "x.html")
    assert res.returncode == 2
    assert "no records found" in res.stderr
    assert not (tmp_path / "x.html").exists()

    res = run_cli(tmp_path / "missing", "-o", tmp_path / "x.html")
    assert res.returncode == 2
    assert "error:" in res.stderr and "Traceback" not in res.stderr


def test_quality_figures_get_their_own_section_apart_from_conformance():
    q = {"cosine": 0.97, "op": "decode", "bits": 2, "sparsity": 0.7, "compression_ratio": 0.21,
         "rel_err": 0.3, "max_abs_err": 1.5, "mean_abs_err": 0.2}
    failing = make_record("mustafar[decode-a]", outcome="fail", quality=q)
    html = render_html([failing, make_record("mustafar[decode-b]", quality=dict(q, cosine=0.5)),
                        make_record("decode[c]")])
    table = section_table(html, "quality")
    header, *rows = table.rows
    assert header[4:8] == ["op", "sparsity", "bits", "compression_ratio"]
    assert [r[0] for r in rows] == ["mustafar[decode-a]", "mustafar[decode-b]"]
    assert rows[0][3] == "fail" and rows[0][header.index("cosine")] == "0.97"
    assert "id=\"quality\"" not in render_html([make_record("decode[c]")])
