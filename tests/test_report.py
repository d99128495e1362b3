"""The HTML report: escaping, merging runs, the family x device matrix, per-case tables with
parameter columns and folded passes, links from summary figures to their cases, records schema 2
(oom/not_run, phases, elapsed time, run status, compile hazards), odd record sets, the CLI,
self-containment. (No import cycle inside attnsuite/report: tests/test_structure.py.)"""
from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import subprocess
import sys
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # so the tests also run without an installed package
    sys.path.insert(0, str(REPO))

from attnsuite.records import read_records  # noqa: E402
from attnsuite.report import render_html, render_report  # noqa: E402
from attnsuite.report.fmt import fmt_duration, fmt_num  # noqa: E402
from attnsuite.report.sections import (  # noqa: E402
    case_groups,
    family_device_matrix,
    outcome_counts,
    tight_cases,
)

CASES = [
    "prefill[fp16-B2-Hq8-Hkv2-S17-D64-causal]",
    "prefill[bf16-B1-Hq4-Hkv4-S128-D128-full]",
    "prefill[fp32-B1-Hq2-Hkv1-S1-D32-causal]",
]


def make_record(case_id=CASES[0], *, device="cpu", outcome="pass", run_id=None,
                finished_at="2026-11-21T05:30:10+00:00", family=None, schema=1, **extra) -> dict:
    family = family or case_id.split("[", 1)[0]
    run_id = run_id or f"{device}-20261121-053000"
    rec = {
        "schema": schema,
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
            fh.write((rec if isinstance(rec, str) else json.dumps(rec)) + "\n")
    return run_dir


# --------------------------------------------------------------------------- reading the page


class _Tables(HTMLParser):
    """Text of every cell of the tables inside <section id=...>, row by row, with each row's
    attributes and the header row of its table (so tests name columns, not positions)."""

    def __init__(self, section_id: str):
        super().__init__()
        self.section_id = section_id
        self.depth = 0  # >0 while inside the wanted section
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None
        self.cell_classes: list[list[str]] = []
        self.row_attrs: list[dict] = []
        self.headers: list[list[str]] = []  # the header of the table each row belongs to
        self._header: list[str] = []
        self._open_details: list[bool] = []
        self.folded: list[bool] = []  # is the row inside a closed <details>?
        self._group: dict | None = None  # the attributes of a <tbody data-row> being read
        self._group_rows = 0
        self.continued: list[bool] = []  # is the row a second line of the case above it?

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            if self.depth or attrs.get("id") == self.section_id:
                self.depth += 1
        if not self.depth:
            return
        if tag == "details":
            self._open_details.append("open" in attrs)
        elif tag == "table":
            self._header = []
        elif tag == "tbody" and "data-row" in attrs:
            self._group, self._group_rows = attrs, 0
        elif tag == "tr":
            self.rows.append([])
            self.cell_classes.append([])
            grouped = self._group is not None
            self.row_attrs.append(self._group if grouped and not self._group_rows else attrs)
            self.continued.append(grouped and self._group_rows > 0)
            self._group_rows += 1
            self.headers.append(self._header)
            self.folded.append(not all(self._open_details) if self._open_details else False)
        elif tag in ("td", "th") and self.rows:
            self.cell = []
            self.cell_classes[-1].append(attrs.get("class") or "")
        elif tag == "br" and self.cell is not None:
            self.cell.append(" ")

    def handle_endtag(self, tag):
        if not self.depth:
            return
        if tag == "details" and self._open_details:
            self._open_details.pop()
        elif tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "tbody":
            self._group = None
        elif tag == "tr" and self.rows and not self._header and "data-row" not in self.row_attrs[-1] \
                and not self.continued[-1]:
            self._header = self.rows[-1]
            self.headers[-1] = self._header
        elif tag == "section":
            self.depth -= 1

    def handle_data(self, data):
        if self.depth and self.cell is not None:
            self.cell.append(data)

    def data_rows(self) -> list[dict]:
        """Rows that carry data-row, as {column header: text}, plus "_attrs" and "_folded"."""
        out = []
        for cells, attrs, header, folded, more in zip(self.rows, self.row_attrs, self.headers, self.folded,
                                                        self.continued):
            if more:  # a case's second line: its details
                out[-1]["Details"] = " ".join(cells)
            elif "data-row" in attrs:
                out.append(dict(zip(header, cells), _attrs=attrs, _folded=folded))
        return out


def section_table(html: str, section_id: str) -> _Tables:
    parser = _Tables(section_id)
    parser.feed(html)
    assert parser.rows, f"no table in section {section_id}"
    return parser


def case_rows(html: str) -> dict[str, dict]:
    """The per-case rows by case id (the row's title) and device."""
    rows = section_table(html, "cases").data_rows()
    titles = dict(re.findall(r'<tbody id="([^"]+)"[^>]*>\s*<tr>\s*<td class="case" title="([^"]*)"', html))
    by_case = {}
    for r in rows:
        case = titles[r["_attrs"]["id"]].replace("&#34;", '"').replace("&lt;", "<").replace("&gt;", ">") \
            .replace("&amp;", "&").replace("&#39;", "'")
        by_case[(case, r["_attrs"]["data-device"])] = r
    return by_case


def section_html(html: str, section_id: str) -> str:
    m = re.search(rf'<section id="{section_id}">(.*?)</section>', html, re.S)
    assert m, f"no section {section_id}"
    return m.group(1)


def one_case(html: str, case_id: str, device: str = "cpu") -> dict:
    return case_rows(html)[(case_id, device)]


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
    assert len(re.findall(r"<script\b", html, re.I)) == 1  # the page's own script, nothing else
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>gpu</b>" not in html and "&lt;b&gt;gpu&lt;/b&gt;" in html
    assert "a &lt; b &amp;&amp; c &gt; d" in html
    # A long message is folded: its first line is the summary, the whole text inside. A failing
    # case's details start open.
    assert re.search(r"<details open>\s*<summary>&lt;script&gt;alert\(1\)&lt;/script&gt;</summary>", html)
    assert re.search(r'<pre class="msg">&lt;script&gt;alert\(1\)&lt;/script&gt;\ncompiler said', html)


def test_script_in_ids_and_names_is_escaped():
    evil = '"><script>alert(2)</script>'
    rec = make_record("prefill[" + evil + "]", outcome="error", family="pre<fill>" + evil,
                      impl=evil, stage=evil, run_id=evil, repro="pytest '" + evil + "'",
                      params={evil: evil})
    html = render_html([rec], title=evil)
    assert "<script>alert" not in html.lower()
    assert "&#34;&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in html  # quotes escaped: no attribute breakout
    assert "pre&lt;fill&gt;" in html
    # Anchors are reduced to safe characters.
    assert re.search(r'id="family-pre-fill-script-alert-2-script"', html)
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", a) for a in re.findall(r'\sid="([^"]+)"', html))


def test_the_only_script_runs_by_its_hash_and_nothing_can_be_fetched():
    html = render_html([make_record()])
    (policy,) = re.findall(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html)
    policy = unescape(policy)
    (script,) = re.findall(r"<script>(.*?)</script>", html, re.S)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy
    assert "default-src 'none'" in policy and "unsafe-inline" not in policy.split("script-src")[1]


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

    # Both runs listed, both environments; the per-case table gets a device column.
    assert "cpu-20261121-053000" in html and "cuda-20261121-060000" in html
    env = section_table(html, "environment")
    assert sorted(r[0] for r in env.rows[1:]) == ["cpu", "cuda"]
    assert one_case(html, CASES[2], "cuda")["Device"] == "cuda"


def test_later_record_for_the_same_key_wins():
    old = make_record(CASES[0], outcome="fail", message="old failure text",
                      finished_at="2026-11-21T05:30:10+00:00", run_id="cpu-old")
    new = make_record(CASES[0], outcome="pass", message=None,
                      finished_at="2026-11-21T07:00:00+00:00", run_id="cpu-new")
    for order in ([old, new], [new, old]):
        html = render_html(order)
        assert "old failure text" not in html
        rows = case_rows(html)
        assert [(case, r["Outcome"]) for (case, _), r in rows.items()] == [(CASES[0], "pass")]
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


def test_failures_first_passes_folded_and_tight_cases():
    recs = [
        make_record("prefill[c]", outcome="pass", headroom=1.1,
                    metrics={"o": {"max_abs_err": 1e-3, "allowed": 1.1e-3, "headroom": 1.1},
                             "lse": {"max_abs_err": 1e-5, "allowed": 1e-3, "headroom": 100.0}}),
        make_record("prefill[a]", outcome="pass", headroom=float("inf"),
                    metrics={"o": {"max_abs_err": 0.0, "allowed": 1e-3, "headroom": float("inf")}}),
        make_record("prefill[d]", outcome="crash", message="segfault"),
        make_record("prefill[b]", outcome="xfail"),
        make_record("prefill[e]", outcome="xpass", message="[XPASS(strict)] the entry looks stale"),
        make_record("prefill[f]", outcome="pass", headroom=1.2499),
        make_record("prefill[g]", outcome="oom", message="CUDA out of memory", schema=2),
    ]
    [group] = case_groups(recs)
    assert [r["case_id"] for r in group["rows"]] == [
        "prefill[d]", "prefill[e]", "prefill[g]", "prefill[a]", "prefill[b]", "prefill[c]", "prefill[f]"]
    assert [r["case_id"] for r in group["attention"]] == ["prefill[d]", "prefill[e]", "prefill[g]", "prefill[b]"]
    assert [r["case_id"] for r in tight_cases(recs)] == ["prefill[c]", "prefill[f]"]

    html = render_html(recs)
    tight = section_table(html, "tight")
    assert [r[0] for r in tight.rows[1:]] == ["prefill[c]", "prefill[f]"]
    assert tight.rows[1][3] == "1.1" and tight.rows[2][3] == "1.25"
    rows = case_rows(html)
    assert [case for case, _ in rows] == [r["case_id"] for r in group["attention"] + group["passing"]]
    # Passing rows sit in a folded table, the others in the open one.
    assert {case: r["_folded"] for (case, _), r in rows.items()} == {
        "prefill[d]": False, "prefill[e]": False, "prefill[g]": False, "prefill[b]": False,
        "prefill[a]": True, "prefill[c]": True, "prefill[f]": True}
    assert rows[("prefill[a]", "cpu")]["Headroom"] == "inf"
    assert "o: max abs err 0.001 · allowed 0.0011" in rows[("prefill[c]", "cpu")]["Details"]
    assert rows[("prefill[g]", "cpu")]["_attrs"]["class"] == "warn"
    # The matrix cell is red (crash, xpass); its min headroom ignores non-passes.
    cell = family_device_matrix(recs)["rows"][0]["cells"][0]
    assert cell["bad"] and cell["min_headroom"] == "1.1"


def test_parameter_columns_are_what_varies_and_the_rest_is_said_once():
    recs = [make_record(f"decode[{s}-{d}]", params={"S": s, "D": d, "dtype": "fp16", "lse": True},
                        family="decode") for s in (17, 300) for d in (64, 128)]
    recs.append(make_record("decode[odd]", family="decode", params={"S": 1, "D": 64, "dtype": "fp16",
                                                                     "lse": True, "qscale": 0.5}))
    [group] = case_groups(recs)
    assert group["param_keys"] == ["S", "D", "qscale"]  # qscale: only one case has it
    assert {p["name"]: p["value"] for p in group["constant_params"]} == {
        "impl": "triton", "device": "cpu", "dtype": "fp16", "lse": "yes"}
    html = render_html(recs)
    row = one_case(html, "decode[300-128]")
    assert (row["S"], row["D"], row["qscale"]) == ("300", "128", "—")
    assert one_case(html, "decode[odd]")["qscale"] == "0.5"
    assert "Impl" not in row and "Device" not in row  # the same for every case: said once
    assert "<code>dtype=fp16</code>" in html


def test_summary_figures_link_to_their_cases():
    recs = [make_record("decode[a]", family="decode", headroom=3.0),
            make_record("decode[b]", family="decode", headroom=1.2, duration_s=9.0),
            make_record("decode[c]", family="decode", outcome="fail", headroom=0.1)]
    html = render_html(recs)
    ids = set(re.findall(r'\sid="([^"]+)"', html))
    links = re.findall(r'href="#(case-[^"]+)"', html)
    assert links and set(links) <= ids
    target = one_case(html, "decode[b]")["_attrs"]["id"]
    matrix = section_table(html, "matrix")
    assert f'href="#{target}">1.2</a>' in html  # min headroom
    assert "1.2" in matrix.rows[1][1]
    assert f'<a href="#{target}">decode[b]</a>' in html  # tight list, slowest case
    assert f'Slowest case: cpu <a href="#{target}">decode[b]</a> (9.00 s)' in html
    # Outcome counts link to the filter that shows their rows.
    assert 'href="?family=decode&amp;device=cpu&amp;mode=numeric&amp;outcome=fail"' in html
    assert 'href="?outcome=pass"' in html


def test_repro_command_in_a_copyable_block():
    rec = make_record(repro="pytest 'cases/test_prefill.py::test_prefill[a b]' --device cpu")
    html = render_html([rec])
    assert re.search(r'<div class="repro"><pre><code>pytest &#39;cases/test_prefill.py::test_prefill\[a b\]&#39; '
                     r'--device cpu</code></pre><button type="button" class="copy" hidden>copy</button></div>', html)


def test_filter_bar_offers_every_value_present():
    recs = [make_record("decode[a]", family="decode"), make_record("decode[a]", family="decode", device="cuda"),
            make_record("prefill[a]", outcome="fail", impl="sdpa"),
            make_record("prefill[b]", mode="compile", device="npu")]
    html = render_html(recs)
    bar = re.search(r'<nav id="filters" hidden.*?</nav>', html, re.S).group(0)
    selects = dict(re.findall(r'<select data-dim="(\w+)">(.*?)</select>', bar, re.S))
    assert list(selects) == ["family", "device", "impl", "outcome", "mode"]

    def values(dim):
        return re.findall(r'<option value="([^"]*)">', selects[dim])

    assert values("family") == ["", "decode", "prefill"]
    assert values("device") == ["", "cpu", "cuda", "npu"]
    assert values("impl") == ["", "sdpa", "triton"]
    assert values("outcome") == ["", "pass", "fail"]
    assert values("mode") == ["", "compile", "numeric"]
    assert '<option value="cpu">cpu (2)</option>' in selects["device"]
    # Every row carries what the bar filters on.
    row = one_case(html, "prefill[b]", "npu")
    assert {k: v for k, v in row["_attrs"].items() if k.startswith("data-")} == {
        "data-row": None, "data-family": "prefill", "data-device": "npu", "data-impl": "triton",
        "data-outcome": "pass", "data-mode": "compile"}


def test_cpu_only_page_says_timings_need_a_device_run():
    html = render_html([make_record(duration_s=12.0)])
    assert "Timings need a device run." in html and "Triton interpreter" in html
    assert "Triton\n    interpreter time" in section_html(html, "timing")
    with_gpu = render_html([make_record(duration_s=12.0), make_record(device="cuda")])
    assert "Timings need a device run." not in with_gpu
    # Compile-only records never launch anything: a cpu + compile-only page still gets the note.
    assert "Timings need a device run." in render_html([make_record(), make_record(device="npu", mode="compile")])


def test_on_a_cpu_page_outcomes_and_known_failures_come_before_the_timing_sections():
    kf = {"id": "interp_bf16_dot", "reason": "bf16 tl.dot", "versions": "triton>=3.6,<3.10",
          "note": "interp_bf16_dot"}
    recs = [make_record(duration_s=12.0),
            make_record(CASES[1], outcome="xfail", message="max abs err 1e10 > allowed", known_failure=kf)]
    order = lambda html, ids: [html.index(f'<section id="{i}">') for i in ids]  # noqa: E731
    cpu = render_html(recs)
    a, b, c = order(cpu, ("known-failures", "cases", "timing"))
    assert a < b < c
    gpu = render_html([dict(r, device="cuda") for r in recs])
    a, b, c = order(gpu, ("known-failures", "timing", "cases"))
    assert a < b < c


def test_a_known_failure_links_to_its_notes_inside_the_page():
    """The notes' section is in the page: a link to porting_notes.md from reports/ would open raw
    markdown, where the anchor does nothing."""
    kf = {"id": "interp_bf16_dot", "reason": "bf16 tl.dot", "versions": "triton>=3.6,<3.10",
          "note": "interp_bf16_dot", "probe": "probes[interp_bf16_dot-original-bf16]"}
    html = render_html([make_record(CASES[1], outcome="xfail", message="max abs err", known_failure=kf)])
    assert "porting_notes.md#" not in html
    assert '<a href="#kf-interp_bf16_dot">interp_bf16_dot</a>' in section_html(html, "cases")
    known = section_html(html, "known-failures")
    assert 'id="kf-interp_bf16_dot"' in known and "1 xfail" in known
    notes = (REPO / "porting_notes.md").read_text(encoding="utf-8")
    section = notes.split("## interp_bf16_dot\n", 1)[1].split("\n## ", 1)[0].strip()
    first = section.splitlines()[0]
    assert unescape(first) in unescape(known)
    # An entry whose note is not in the notes still gets its section (reason, versions).
    other = render_html([make_record(outcome="xfail", known_failure={"id": "gone", "reason": "why",
                                                                     "note": "no_such_section"})])
    assert 'id="kf-gone"' in other and "why" in section_html(other, "known-failures")


def test_a_non_strict_xpass_is_not_red_a_strict_one_is():
    """The colours agree with the exit status: a strict entry whose case passes fails the run
    (pytest reports XPASS(strict)); a non-strict one passes it."""
    strict = make_record(outcome="xpass", message="[XPASS(strict)] the entry looks stale")
    loose = make_record(CASES[1], outcome="xpass", message="explains a failure where it happens")
    [row] = family_device_matrix([loose])["rows"]
    assert not row["cells"][0]["bad"]
    [row] = family_device_matrix([strict])["rows"]
    assert row["cells"][0]["bad"]
    [group] = case_groups([loose, strict])
    assert [r["case_id"] for r in group["attention"]][0] == strict["case_id"]
    html = render_html([loose])
    assert 'class="bad"' not in section_html(html, "matrix")
    assert 'class="bad"' not in section_html(html, "placement")


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
    rows = {case: r for (case, _), r in case_rows(html).items()}
    assert rows["decode[x]"]["Outcome"] == "timeout" and rows["decode[x]"]["Headroom"] == "—"
    assert rows["decode[y]"]["Duration"] == "—"
    assert rows["decode[z]"]["Headroom"] == "inf"  # falls back to the per-output headroom
    assert "12345" in rows["decode[z]"]["Details"]


# --------------------------------------------------------------------------- records schema 2


def test_schema_2_outcomes_phases_and_elapsed_time():
    recs = [
        make_record("decode[a]", family="decode", schema=2, duration_s=3.0,
                    phases={"inputs": 0.5, "first_call": 1.5, "impl": 0.2, "reference": 0.6, "compare": 0.1}),
        make_record("decode[b]", family="decode", schema=2, outcome="oom", device="cuda",
                    message="CUDA out of memory. Tried to allocate 2.00 GiB"),
        make_record("decode[c]", family="decode", schema=2, outcome="not_run", device="cuda",
                    message="the run was interrupted (SIGINT) before this case ran", duration_s=None),
        make_record("decode[d]", family="decode", schema=2, outcome="timeout", device="cuda",
                    duration_s=300.5, elapsed_s=301.0, message="Timeout (>300.0s) from pytest-timeout."),
    ]
    html = render_html(recs)
    counts = {c["outcome"]: c["count"] for c in outcome_counts(recs)}
    assert counts["oom"] == 1 and counts["not_run"] == 1
    assert re.search(r'class="count c-oom"[^>]*><span class="n">1</span>oom', html)
    rows = {case: r for (case, _), r in case_rows(html).items()}
    assert rows["decode[b]"]["_attrs"]["class"] == "warn" and rows["decode[c]"]["Outcome"] == "not_run"
    assert rows["decode[d]"]["Duration"] == "5m 01s" and "5m 01s before it stopped" in rows["decode[d]"]["Details"]
    assert "first call (compile) 1.50 s" in rows["decode[a]"]["Details"]
    # Where the time goes: phase totals with shares, slowest cases first.
    timing = section_table(html, "timing")
    phases = {r[0]: r[1:] for r in timing.rows if len(r) == 3}
    assert phases["first call (compile)"] == ["1.50 s", "50%"]
    assert phases["outside the phases (set-up, teardown, harness)"] == ["100 ms", "3%"]
    slowest = [r for r in timing.data_rows() if "Total" in r]
    assert [r["Case"] for r in slowest] == ["decode[a]", "decode[d]", "decode[b]"]  # per device, slowest first
    assert "Timings need a device run." not in html


def test_run_status_banner_and_skipped_records_are_said(tmp_path):
    run = write_run(tmp_path / "cuda-1", [make_record(c, device="cuda", schema=2) for c in CASES[:2]])
    (run / "run.json").write_text(json.dumps({
        "run_id": "cuda-1", "collected": 10, "recorded": 2, "interrupted": "SIGINT",
        "not_run_reason": "interrupted by the user", "finished_at": "2026-11-21T06:00:00+00:00"}))
    done = write_run(tmp_path / "cpu-1", [make_record(CASES[2])])
    (done / "run.json").write_text(json.dumps({"run_id": "cpu-1", "collected": 1, "recorded": 1,
                                               "interrupted": None, "not_run_reason": None}))
    res = run_cli(run, done, "-o", tmp_path / "out.html")
    assert res.returncode == 0, res.stderr
    html = (tmp_path / "out.html").read_text()
    banners = re.findall(r'<div class="banner warn run-status">(.*?)</div>', html, re.S)
    assert len(banners) == 1
    assert "cuda-1: interrupted (SIGINT)</strong>: 2 of 10 cases recorded. interrupted by the user" in banners[0]
    # Without run.json (older harness), no banner and no error.
    (run / "run.json").unlink()
    (run / "ignored.txt").write_text("not a record")
    assert run_cli(run, "-o", tmp_path / "o2.html").returncode == 0
    assert "run-status" not in (tmp_path / "o2.html").read_text()


def test_compile_hazards_flagged_prominently():
    hazards = {"grid": {"programs": 7, "ai_cores": 24, "vector_cores": 48, "ratio": 0.29, "flagged": True},
               "accesses": {"scalar": 3, "row_gather": 1,
                            "sites": [{"kind": "scalar", "line": "decode.py:88", "count": 3},
                                      {"kind": "row_gather", "line": "decode.py:91", "count": 1}]},
               "ub": {"bytes": 180000, "capacity": 196608, "percent": 91.6, "flagged": True}}
    flagged = make_record("decode[a]", family="decode", schema=2, device="npu", mode="compile",
                          compile={"Ascend910B2": [{"kernel": "_decode_fwd", "outcome": "pass",
                                                    "stage": None, "hazards": hazards}]})
    clean = make_record("decode[b]", family="decode", schema=2, device="npu", mode="compile",
                        compile={"Ascend910B2": [{"kernel": "_decode_fwd", "outcome": "pass", "hazards": {
                            "grid": {"programs": 48, "ai_cores": 24, "ratio": 2.0, "flagged": False},
                            "accesses": {"scalar": 0, "row_gather": 0, "sites": []},
                            "ub": {"bytes": 1000, "capacity": 196608, "percent": 0.5, "flagged": False}}}]})
    old = make_record("decode[c]", family="decode", device="npu", mode="compile",
                      compile={"Ascend910B2": [{"kernel": "k", "outcome": "pass", "scalar_accesses": 2,
                                                "scalar_summary": ["decode.py:12: 2 scalar loads"]}]})
    html = render_html([flagged, clean, old])
    rows = section_table(html, "hazards").data_rows()
    assert [r["Case"] for r in rows] == ["decode[a]", "decode[c]"]
    top = rows[0]
    assert top["Grid"] == "7 programs / 24 AI cores (0.29×)" and top["UB"] == "UB 91.6% (176 KiB of 192 KiB)"
    assert (top["Scalarized"], top["Row gathers"]) == ("3", "1")
    assert "scalar decode.py:88 ×3" in top["Where"] and "row_gather decode.py:91 ×1" in top["Where"]
    assert re.search(r'<td class="flag-line">7 programs', html)
    case = one_case(html, "decode[a]", "npu")
    assert "grid" in case["Compiles"] and "UB" in case["Compiles"] and "3 scalarized" in case["Compiles"]
    assert rows[1]["Where"] == "scalar decode.py:12: 2 scalar loads"  # schema 1 still reads


# --------------------------------------------------------------------------- odd record sets


ODD_LINES = [
    json.dumps(make_record("decode[ok]", family="decode")),
    json.dumps(make_record("decode[noimpl]", family="decode", impl=None, outcome="skip")),
    json.dumps(make_record("decode[other-impl]", family="decode", impl=7)),
    json.dumps(make_record("decode[weird]", family="decode", outcome="exploded", schema=2,
                           params=["not", "a", "dict"], phases={"inputs": "soon", "impl": -1},
                           compile="nope", bench={"kernel": 3}, metrics=[1, 2], quality="high")),
    json.dumps(make_record("decode[bench]", family="decode", mode="bench", schema=2,
                           bench={"kernel": {"device": "fast", "host_us": [1]}, "baselines": {"x": None},
                                  "speedup": {"x": "big"}, "repeat": {"device_median_ms": "x"}})),
    json.dumps({"schema": 2, "case_id": None, "family": "decode", "device": "cpu", "outcome": "pass"}),
    json.dumps({"schema": 2, "case_id": "decode[nodevice]", "outcome": "pass"}),
    json.dumps({"schema": 99, "case_id": "decode[future]", "device": "cpu", "outcome": "pass"}),
    json.dumps(["a", "list"]),
    json.dumps("a string"),
    json.dumps({"schema": 2, "case_id": 42, "device": "cpu", "outcome": "pass", "family": None,
                "finished_at": 5, "run_id": {"x": 1}}),
    '{"schema": 2, "case_id": "decode[torn',
]


def test_odd_and_partial_record_sets_render_and_say_what_was_skipped(tmp_path):
    run = write_run(tmp_path / "runs" / "cuda-odd", ODD_LINES)
    (run / "run.json").write_text("{not json")
    (tmp_path / "runs" / "cpu-empty").mkdir()
    (tmp_path / "runs" / "notes.txt").write_text("hello")
    out = tmp_path / "odd.html"
    res = run_cli(*sorted((tmp_path / "runs").iterdir()), "-o", out)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    html = out.read_text()
    shown = {case for case, _ in case_rows(html)}
    assert shown == {"decode[ok]", "decode[noimpl]", "decode[other-impl]", "decode[weird]"}
    note = re.search(r'<div class="banner info skipped-records">(.*?)</div>', html, re.S).group(1)
    for reason in ("2 × not a JSON object", "1 × no usable case_id<", "1 × no usable family, device",
                   "1 × no usable case_id, family", "1 × schema 99", "1 × line that is not JSON",
                   "1 × not a run directory or .jsonl file: notes.txt"):
        assert reason in note, note
    assert "exploded" in html and "Outcomes this report does not know" in html
    assert "skipped:" in res.stdout
    # An implementation that is not a name is shown as the harness fills it in, apart.
    matrix = section_table(html, "matrix")
    assert [r[0] for r in matrix.rows[1:]] == ["decode · triton", "decode · unknown"]


def test_report_of_everything_in_the_runs_directory_never_crashes(tmp_path):
    """``python -m attnsuite.report reports/runs/*`` over every kind of run this suite writes."""
    runs = tmp_path / "runs"
    write_run(runs / "cpu-a", [make_record(c) for c in CASES])
    write_run(runs / "cuda-b", [make_record(c, device="cuda", schema=2, outcome=o)
                                for c, o in zip(CASES, ("oom", "not_run", "crash"))])
    write_run(runs / "torn", ['{"schema": 1, "case_id": "pre'])
    res = run_cli(*sorted(runs.iterdir()), "-o", tmp_path / "all.html")
    assert res.returncode == 0, res.stderr
    assert "6 cases (6 records read)" in res.stdout


# --------------------------------------------------------------------------- formatting


@pytest.mark.parametrize("value, text", [
    (None, "—"), ("n/a", "—"), (float("inf"), "inf"), (float("-inf"), "-inf"), (math.nan, "nan"),
    (0, "0"), (1.23456, "1.23"), (1234.5, "1.23e+03"), (0.000123456, "0.000123"), (4.0, "4"),
])
def test_fmt_num(value, text):
    assert fmt_num(value) == text


@pytest.mark.parametrize("value, text", [
    (None, "—"), (-1, "—"), (0.0123, "12 ms"), (1.5, "1.50 s"), (61, "1m 01s"), (7322, "2h 02m"),
])
def test_fmt_duration(value, text):
    assert fmt_duration(value) == text


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
    assert not re.search(r"<script\b[^>]*\bsrc=", html, re.I)
    assert not re.search(r"<link\b", html, re.I)
    assert "@import" not in html and "url(" not in html
    assert not re.search(r"<(?:img|iframe|object|embed)\b", html, re.I)
    # Family links from the matrix point at family sections that exist, one per family.
    families = re.findall(r'href="#(family-[^"]+)"', html)
    assert len(families) == len(set(families)) == 4  # decode, paged decode, paged-decode, prefill
    for anchor in set(re.findall(r'href="#([^"]+)"', html)):
        assert html.count(f'id="{anchor}"') == 1, anchor


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


# --------------------------------------------------------------------------- hosts and devices


def test_hosts_and_devices_break_counts_and_time_down_per_card_and_host():
    from attnsuite.report.placement import placement_rows

    def on(host, index, uuid, worker, case, outcome="pass", seconds=1.0):
        env = {"host": host, "device_name": "NVIDIA H100 80GB HBM3" if index is not None else "(controller)"}
        return make_record(case, device="cuda", outcome=outcome, run_id=f"run-{host}", worker=worker,
                           device_index=index, device_uuid=uuid, env=env, duration_s=seconds)

    ids = [f"decode[fp16-S{n}]" for n in range(8)]
    records = [on("host-a", 0, "GPU-aaa", "gw0", ids[0]), on("host-a", 0, "GPU-aaa", "gw0", ids[1], seconds=3.0),
               on("host-a", 1, "GPU-bbb", "gw1", ids[2], "fail"), on("host-a", 1, "GPU-bbb", "gw1", ids[3], "fail"),
               on("host-a", 1, "GPU-bbb", "gw1", ids[4]),
               # the controller's record of a worker that died: no device of its own
               on("host-a", None, None, "gw1", ids[5], "crash"),
               on("host-b", 0, "GPU-ccc", "gw0", ids[6]), on("host-b", 0, "GPU-ccc", "gw0", ids[7], seconds=4.0)]
    rows = {(r["host"], r["device"]): r for r in placement_rows(records)}
    assert set(rows) == {("host-a", "cuda:0"), ("host-a", "cuda:1"), ("host-b", "cuda:0")}
    card = rows[("host-a", "cuda:1")]  # the faulty card: its failures and the crash in one row
    assert card["uuid"] == "GPU-bbb" and card["cases"] == 4 and card["bad"] == 3
    assert {c["outcome"]: c["count"] for c in card["counts"]} == {"pass": 1, "fail": 2, "crash": 1}
    a0, b0 = rows[("host-a", "cuda:0")], rows[("host-b", "cuda:0")]  # same index, different host and card
    assert (a0["uuid"], b0["uuid"]) == ("GPU-aaa", "GPU-ccc") and a0["bad"] == b0["bad"] == 0
    assert (a0["total"], a0["median"], b0["total"], b0["slowest"]) == ("4.00 s", "2.00 s", "5.00 s", ids[7])
    assert b0["share"] == "38%"  # 5 of the 13 s of case time
    html = render_html(records)
    table = section_table(html, "placement")
    header = table.headers[-1]
    body = [dict(zip(header, cells)) for cells in table.rows if cells != header]
    assert [(r["Host"], r["Device"], r["UUID"], r["Cases"]) for r in body] == [
        ("host-a", "cuda:0", "GPU-aaa", "2"), ("host-a", "cuda:1", "GPU-bbb", "4"), ("host-b", "cuda:0", "GPU-ccc", "2")]
    assert "2 fail" in body[1]["Outcomes"] and "1 crash" in body[1]["Outcomes"]


def test_the_terminal_summary_adds_a_line_per_device_when_a_run_used_several():
    from attnsuite.summary import summary_lines

    def on(index, case, outcome="pass"):
        return make_record(case, device="cuda", outcome=outcome, device_index=index, worker=f"gw{index}",
                           env={"host": "host-a", "device_name": "H100"})

    one = summary_lines([on(0, "decode[a]"), on(0, "decode[b]")])
    assert len(one) == 1 and one[0].startswith("decode")  # one device: the family lines only
    two = summary_lines([on(0, "decode[a]"), on(1, "decode[b]", "fail"), on(1, "decode[c]", "crash")])
    assert two[1:] == ["host-a cuda:0: 1 pass; case time 250 ms",
                       "host-a cuda:1: 1 fail · 1 crash; case time 500 ms"]


def test_the_terminal_summary_names_launches_that_compiled_only_on_a_retry():
    from attnsuite.summary import retried_compile_lines, summary_lines

    def compiled(case, *launches):
        return make_record(case, device="npu", mode="compile", compile={"Ascend910B2": list(launches)})

    clean = {"kernel": "_decode_fwd", "outcome": "pass"}
    crash = "[ConvertTritonIRToLinalgIR] triton-adapter-opt exit -11 (killed by SIGSEGV)\nmore"
    retried = {"kernel": "_mustafar_values_fwd", "outcome": "pass", "flaky": crash}
    assert retried_compile_lines([compiled("decode[a]", clean)]) == []
    records = [compiled("decode[a]", clean), compiled("mustafar[b]", retried, clean),
               compiled("mustafar[c]", retried, retried)]
    (line,) = retried_compile_lines(records)
    assert line == ("Ascend910B2: 3 launches in 2 cases compiled only on a retry, first mustafar[b] "
                    "(_mustafar_values_fwd): [ConvertTritonIRToLinalgIR] triton-adapter-opt exit -11 "
                    "(killed by SIGSEGV)")
    assert summary_lines(records)[-1] == line
