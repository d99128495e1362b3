"""The report's benchmarks section: the per-family table, the inline SVG charts, and keeping
benchmark records out of the conformance counts. Synthetic records only."""
from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from attnsuite.report import render_html
from attnsuite.report.bench import bench_context
from attnsuite.report.bench_records import speedup
from attnsuite.report.context import build_context
from attnsuite.report.fmt import fmt_context, fmt_median_iqr
from attnsuite.report.svg import Axis, Line, heat_colour, line_chart, log_ticks

GATHER_NOTE = "gather excluded: SDPA over the equivalent dense cache"
KEPT = (0.01, 0.02, 0.05, 0.2, 1.0)
CONTEXTS = (1024, 4096, 16384, 32768)
SIZES = (128, 256, 512, 1024)


# --------------------------------------------------------------------------- record factories


def _stats(median_ms: float, iqr_ms: float | None = None, runs: int = 100) -> dict:
    iqr_ms = median_ms * 0.04 if iqr_ms is None else iqr_ms
    return {"median_ms": median_ms, "q1_ms": median_ms - iqr_ms / 2, "q3_ms": median_ms + iqr_ms / 2,
            "iqr_ms": iqr_ms, "runs": runs}


def bench_record(case_id: str, *, kernel_ms: float | None = 0.1, iqr_ms: float | None = None,
                 baselines: dict | None = None, device: str = "cuda", host: str = "h100-a",
                 outcome: str = "pass", message: str | None = None, sweep: dict | None = None,
                 params: dict | None = None, config: dict | None = None, compile_s: float = 1.5,
                 finished_at: str = "2026-11-21T06:00:00+00:00", **bench_extra) -> dict:
    """A mode=bench record. ``baselines`` maps a name to a median in ms, to (median, note), or
    to {"unavailable": reason}; speedups are derived from the medians like the harness does.
    ``kernel_ms=None`` gives a record without timings (a skip)."""
    family = case_id.split("[", 1)[0]
    rec = {
        "schema": 1, "run_id": f"{device}-bench-20261121", "case_id": case_id,
        "nodeid": f"cases/test_{family}.py::test_{family}_bench[{case_id.split('[', 1)[-1]}",
        "family": family, "impl": "triton", "device": device, "device_index": 0, "mode": "bench",
        "worker": "gw0", "dtype": "fp16", "params": params or {}, "profile": "full", "tags": ["bench"],
        "outcome": outcome, "stage": None if outcome == "pass" else "launch", "message": message,
        "env": {"python": "3.11.7", "torch": "2.11.0+cu130", "triton": "3.6.0", "triton_backend": "cuda",
                "device_name": "NVIDIA H100 80GB HBM3" if device == "cuda" else f"{device} device",
                "driver": "580.159.04", "host": host, "platform": "linux"},
        "started_at": "2026-11-21T05:59:00+00:00", "finished_at": finished_at,
        "repro": f"pytest 'cases/test_{family}.py' --device {device} --profile full -k bench",
        "bench": None,
    }
    if kernel_ms is None:
        return rec
    bases, speedups = {}, {}
    for name, value in (baselines or {}).items():
        if isinstance(value, dict):
            bases[name] = value
            continue
        median, note = value if isinstance(value, tuple) else (value, None)
        bases[name] = dict(_stats(median), note=note)
        speedups[name] = median / kernel_ms
    rec["bench"] = {
        "kernel": dict(_stats(kernel_ms, iqr_ms), compile_s=compile_s),
        "baselines": bases, "speedup": speedups,
        "config": config if config is not None else {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4},
        "sweep": sweep, **bench_extra,
    }
    return rec


def conformance_record(case_id: str, *, outcome: str = "pass", device: str = "cpu", **extra) -> dict:
    family = case_id.split("[", 1)[0]
    rec = {
        "schema": 1, "run_id": f"{device}-20261121", "case_id": case_id,
        "nodeid": f"cases/test_{family}.py::test_{family}[x]", "family": family, "impl": "triton",
        "device": device, "device_index": 0, "mode": "numeric", "worker": "gw0", "dtype": "fp16",
        "params": {}, "profile": "quick", "tags": [], "outcome": outcome,
        "stage": None if outcome == "pass" else "numeric",
        "message": None if outcome == "pass" else "max abs err 3e-2 > allowed 1e-3",
        "known_failure": None,
        "metrics": {"o": {"max_abs_err": 1e-3, "allowed": 4e-3, "headroom": 4.0}}, "headroom": 4.0,
        "duration_s": 0.3, "started_at": "2026-11-21T05:30:00+00:00",
        "finished_at": "2026-11-21T05:30:01+00:00",
        "env": {"python": "3.11.7", "torch": "2.13.0+cpu", "triton": "3.9.0", "triton_backend": "triton",
                "device_name": "cpu", "driver": "", "host": "ci-1", "platform": "linux"},
        "repro": f"pytest 'cases/test_{family}.py' --device {device}",
    }
    rec.update(extra)
    return rec


def kept_ratio_sweep(family: str = "sparse_decode", series: str = "S32000", overhead_ms: float = 0.005
                     ) -> list[dict]:
    """Kernel time scales with the kept ratio, SDPA over the dense cache does not."""
    return [bench_record(f"{family}[fp16-{series}-kept{k}]", kernel_ms=overhead_ms + 0.07 * k,
                         baselines={"reference": 2.0 + 3 * k, "sdpa_cudnn": (0.064, GATHER_NOTE),
                                    "sdpa_flash": (0.071, GATHER_NOTE)},
                         sweep={"name": "kept_ratio", "series": series, "x": k}, gbps=2000.0 * k,
                         copy_gbps=3030.0)
            for k in KEPT]


def context_sweep(family: str = "decode", series: str = "B1-Hq32-Hkv8-D128") -> list[dict]:
    return [bench_record(f"{family}[fp16-{series}-S{n}]", kernel_ms=0.004 * n / 1024,
                         baselines={"sdpa_flash": 0.0045 * n / 1024, "sdpa_cudnn": 0.0038 * n / 1024,
                                    "reference": 0.03 * n / 1024},
                         sweep={"name": "context", "series": series, "x": n},
                         gbps=1900.0, copy_gbps=3030.0, copy_fraction=1900.0 / 3030.0)
            for n in CONTEXTS]


def block_efficiency(bq: int, bkv: int) -> float:
    """Synthetic: the kernel is best at 128x512 and loses a little per doubling away from it."""
    return 1 + 0.12 * abs(math.log2(bq / 128)) + 0.08 * abs(math.log2(bkv / 512))


def block_shape_sweep(missing=((1024, 1024),), sparsities=(0.3, 0.5, 0.8)) -> list[dict]:
    recs = []
    for s in sparsities:
        for bq in SIZES:
            for bkv in SIZES:
                if (bq, bkv) in missing:
                    continue
                dense = 10.0 * (1 + (bq * bkv) / 2 ** 21)
                recs.append(bench_record(
                    f"block_sparse[bf16-S118806-H3-bq{bq}-bkv{bkv}-s{s}]",
                    kernel_ms=dense * (1 - s) * block_efficiency(bq, bkv),
                    baselines={"dense_kernel": dense, "npu_fusion_attention": {"unavailable": "not an npu"}},
                    params={"bq": bq, "bkv": bkv, "s": s, "S": 118806},
                    sweep={"name": "block_shape", "series": "S118806", "x": s}, tflops=300.0))
    return recs


# --------------------------------------------------------------------------- HTML helpers


class _TableRows(HTMLParser):
    """Text of every cell of the table with the given id, row by row."""

    def __init__(self, table_id: str):
        super().__init__()
        self.table_id, self.inside, self.rows, self.cell = table_id, False, [], None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and attrs.get("id") == self.table_id:
            self.inside = True
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag in ("td", "th"):
            self.cell = []
        elif tag == "br" and self.cell is not None:
            self.cell.append(" ")
        elif tag == "sup" and self.cell is not None:  # a footnote marker reads as ^N
            self.cell.append(" ^")

    def handle_endtag(self, tag):
        if tag == "table":
            self.inside = False
        elif self.inside and tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(" ".join("".join(self.cell).split()))
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def table_rows(html: str, table_id: str) -> list[list[str]]:
    parser = _TableRows(table_id)
    parser.feed(html)
    assert parser.rows, f"no table {table_id}"
    return parser.rows


def section_html(html: str, section_id: str) -> str:
    m = re.search(rf'<section id="{section_id}">(.*?)</section>', html, re.S)
    assert m, f"no section {section_id}"
    return m.group(1)


def svg_tree(svg) -> ET.Element:
    """Parse a chart as XML: it must be well-formed on its own."""
    return ET.fromstring(str(svg))


def family(ctx: dict, name: str) -> dict:
    return next(f for f in ctx["families"] if f["family"] == name)


# --------------------------------------------------------------------------- the table


def test_three_way_table_values_and_speedups():
    rec = bench_record("prefill[fp16-B8-Hkv16-G4-S1024-D64-causal]", kernel_ms=0.344, iqr_ms=0.0062,
                       baselines={"reference": 25.8, "sdpa_flash": 0.323, "sdpa_cudnn": 0.204},
                       tflops=212.4, config={"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8})
    html = render_html([rec])
    header, sub, row = table_rows(html, "tbl-bench-prefill")
    assert header == ["Case", "Device", "Kernel ms", "torch reference", "SDPA flash", "SDPA cuDNN",
                      "TFLOP/s", "Compile", "Config", "Outcome"]
    assert sub == ["ms", "speedup"] * 3
    assert row[0] == rec["case_id"]
    assert row[1] == "cuda:0 h100-a"
    assert row[2] == "0.344 ± 0.0062"
    # Baseline / kernel: above 1 the kernel is faster.
    assert row[3:9] == ["25.8 ± 1", "75×", "0.323 ± 0.013", "0.939×", "0.204 ± 0.0082", "0.593×"]
    assert row[9:] == ["212", "1.50 s", "BLOCK_M=128 BLOCK_N=64 num_warps=8", "pass"]
    # The faster/slower colouring follows the ratio.
    assert re.search(r'<span class="faster">75×</span>', html)
    assert re.search(r'<span class="slower">0.593×</span>', html)


def test_config_per_kernel_gets_a_line_each():
    rec = bench_record("decode[split]", config={"decode_split": {"BLOCK_N": 64, "num_warps": 4},
                                                "merge": {"num_warps": 1}})
    [row] = bench_context([rec])["families"][0]["rows"]
    assert row["config"] == ["decode_split: BLOCK_N=64 num_warps=4", "merge: num_warps=1"]
    assert table_rows(render_html([rec]), "tbl-bench-decode")[1][-2] == \
        "decode_split: BLOCK_N=64 num_warps=4 merge: num_warps=1"
    rec["bench"]["config"] = None
    assert table_rows(render_html([rec]), "tbl-bench-decode")[1][-2] == "—"


def test_speedup_falls_back_to_the_medians():
    rec = bench_record("decode[x]", kernel_ms=0.02, baselines={"sdpa_cudnn": 0.03})
    rec["bench"]["speedup"] = {}
    assert speedup(rec, "sdpa_cudnn") == pytest.approx(1.5)
    rec["bench"]["speedup"] = {"sdpa_cudnn": None}
    assert speedup(rec, "sdpa_cudnn") == pytest.approx(1.5)
    rec["bench"]["kernel"]["median_ms"] = 0
    assert speedup(rec, "sdpa_cudnn") is None  # never a division by zero


@pytest.mark.parametrize("stats, text", [
    ({"median_ms": 0.0712, "iqr_ms": 0.00134}, "0.0712 ± 0.0013"),  # the spread to two digits
    ({"median_ms": 7716.0, "q1_ms": 7700.0, "q3_ms": 7730.0}, "7716 ± 30"),  # IQR from quartiles
    ({"median_ms": 1.5}, "1.5"),
    ({"median_ms": None, "iqr_ms": 1.0}, "—"),
    ({}, "—"),
])
def test_median_iqr_format(stats, text):
    assert fmt_median_iqr(stats) == text


def test_columns_are_the_baselines_of_the_family_and_gbps_with_copy_fraction():
    recs = context_sweep()[:1] + [bench_record("paged_decode[p16]", baselines={"reference": 1.0},
                                               gbps=1500.0, copy_gbps=3000.0)]
    ctx = bench_context(recs)
    assert [b["name"] for b in family(ctx, "decode")["baselines"]] == ["reference", "sdpa_flash", "sdpa_cudnn"]
    paged = family(ctx, "paged_decode")
    assert [b["name"] for b in paged["baselines"]] == ["reference"]
    assert paged["show_gbps"] and not paged["show_tflops"]
    [row] = paged["rows"]
    # copy_fraction missing: computed from gbps / copy_gbps.
    assert (row["gbps"], row["copy_fraction"]) == ("1500", "50%")
    assert "3030" in family(ctx, "decode")["rows"][0]["copy_title"]


def test_skips_show_their_reason_and_unavailable_baselines_their_note():
    recs = [
        bench_record("sparse_paged_decode[bench-kept0.02]", kernel_ms=None, outcome="skip",
                     message="npu_fused_infer_attention_score: page_size 8 is not a multiple of 16"),
        bench_record("sparse_paged_decode[bench-kept0.04]", kernel_ms=0.08,
                     baselines={"reference": 300.0,
                                "npu_fused_infer_attention_score": {"unavailable": "page_size 8 is not a multiple of 16"},
                                "sdpa_cudnn": (0.25, GATHER_NOTE)}),
    ]
    html = render_html(recs)
    rows = table_rows(html, "tbl-bench-sparse_paged_decode")
    header, sub, skipped, timed = rows
    assert header[3:6] == ["torch reference", "SDPA cuDNN", "npu_fused_infer_attention_score"]
    assert skipped[-1].startswith("skip npu_fused_infer_attention_score: page_size 8 is not a multiple of 16")
    assert skipped[2:9] == ["—"] * 7  # kernel, then ms/speedup per baseline
    # The note and the reason are footnotes; the cells carry the marker.
    assert timed[5] == "0.25 ± 0.01 ^1" and timed[7] == "n/a ^2"
    notes = section_html(html, "benchmarks")
    assert f"<sup>1</sup> sdpa_cudnn: {GATHER_NOTE}" in notes
    assert "<sup>2</sup> npu_fused_infer_attention_score unavailable: page_size 8" in notes


def test_bench_records_stay_out_of_the_conformance_sections():
    conf = [conformance_record("decode[a]"), conformance_record("decode[b]", outcome="fail")]
    bench = context_sweep() + [bench_record("decode[skipped]", kernel_ms=None, outcome="skip",
                                            message="no cudnn")]
    ctx = build_context(conf + bench, conf + bench, title="t", generated_at="now")
    assert ctx["total"] == 2
    counts = {c["outcome"]: c["count"] for c in ctx["outcome_counts"]}
    assert (counts["pass"], counts["fail"], counts["skip"]) == (1, 1, 0)
    assert ctx["matrix"]["devices"] == ["cpu"]
    assert [r["case_id"] for g in ctx["case_groups"] for r in g["rows"]] == ["decode[b]", "decode[a]"]
    assert ctx["bench"]["total"] == 5
    # Runs and environments still list the bench run and its host.
    assert {r["run_id"] for r in ctx["runs"]} == {"cpu-20261121", "cuda-bench-20261121"}
    assert "h100-a" in {e["host"] for e in ctx["environments"]}

    html = render_html(conf + bench)
    cases = section_html(html, "cases")
    assert "S1024" not in cases and "decode[skipped]" not in cases
    assert "S1024" not in section_html(html, "matrix")
    assert "2 cases · 5 benchmarks" in html
    assert html.index('id="matrix"') < html.index('id="benchmarks"') < html.index('id="cases"')


def test_no_bench_section_without_bench_records():
    html = render_html([conformance_record("decode[a]")])
    assert 'id="benchmarks"' not in html and "<svg" not in html
    assert bench_context([conformance_record("decode[a]")]) == {"families": [], "total": 0, "unstable": []}


def test_merged_devices_show_device_and_host_per_row():
    recs = [bench_record("decode[bench]", device="cuda", host="h100-a", baselines={"sdpa_cudnn": 0.03}),
            bench_record("decode[bench]", device="npu", host="ascend-7",
                         baselines={"npu_fused_infer_attention_score": 0.05})]
    rows = table_rows(render_html(recs), "tbl-bench-decode")
    assert [r[1] for r in rows[2:]] == ["cuda:0 h100-a", "npu:0 ascend-7"]
    # Each row has a cell for every baseline of the family, "—" where it did not run.
    assert rows[2][3:7] == ["0.03 ± 0.0012", "0.3×", "—", "—"]


# --------------------------------------------------------------------------- charts


def test_kept_ratio_chart_one_line_per_series_and_baseline():
    recs = kept_ratio_sweep(series="S32000") + kept_ratio_sweep(series="S89600-D256")
    fam = family(bench_context(recs), "sparse_decode")
    [chart] = [c for c in fam["charts"] if c["kind"] == "kept_ratio"]
    svg = svg_tree(chart["svg"])
    series = svg.findall(".//g[@class='series']")
    assert len(series) == 2 * 3  # 2 series x (reference, sdpa_flash, sdpa_cudnn)
    assert all(len(g.findall("circle")) == len(KEPT) for g in series)
    labels = [e.findtext("title") for e in svg.findall(".//g[@class='legend-entry']")]
    assert "S32000 · vs SDPA cuDNN" in labels and "S89600-D256 · vs torch reference" in labels
    texts = [t.text for t in svg.iter("text")]
    assert "kept ratio" in texts and "speedup (baseline / kernel)" in texts
    assert {"0.01", "0.1", "1"} <= set(texts)  # log ticks
    assert svg.find(".//line[@class='parity']") is not None
    # viewBox sizing, no namespace URL in the page.
    assert re.fullmatch(r"0 0 \d+ \d+", svg.get("viewBox"))
    assert "http" not in str(chart["svg"])


def test_block_shape_heatmaps_per_sparsity_with_grey_missing_cells():
    recs = block_shape_sweep(missing=((1024, 1024), (128, 1024)), sparsities=(0.0, 0.3, 0.5, 0.8))
    # One cell is a skip that kept its sweep: grey too, with its reason in the tooltip.
    skipped = next(r for r in recs if r["params"] == {"bq": 256, "bkv": 128, "s": 0.5, "S": 118806})
    skipped.update(outcome="skip", message="frame exceeds 1 - s", bench={"sweep": skipped["bench"]["sweep"]})
    heat = [c for c in family(bench_context(recs), "block_sparse")["charts"] if c["kind"] == "block_shape"]
    assert len(heat) == 3  # s = 0.3, 0.5, 0.8; s = 0 is in the table only
    for chart, s in zip(heat, (0.3, 0.5, 0.8)):
        svg = svg_tree(chart["svg"])
        assert f"block_sparse s={s:g}" in svg.findtext("text")
        cells = svg.findall(".//g[@class='cell']")
        assert len(cells) == 16
        missing = [c for c in cells if c.get("data-missing")]
        assert len(missing) == (3 if s == 0.5 else 2)
        assert all(c.find("rect").get("fill") == "#d0d7de" for c in missing)
        texts = [c.findtext("text") for c in cells]
        # Row-major from BQ=128, BKV=128: the speedup over dense_kernel, or why there is none.
        expected = {(bq, bkv): f"{1 / ((1 - s) * block_efficiency(bq, bkv)):.3g}×" for bq in SIZES for bkv in SIZES}
        expected[(1024, 1024)] = expected[(128, 1024)] = "—"
        if s == 0.5:
            expected[(256, 128)] = "skip"
        assert texts == [expected[(bq, bkv)] for bq in SIZES for bkv in SIZES]
        if s == 0.5:
            assert "skip" in texts
            assert any("frame exceeds 1 - s" in c.findtext("title") for c in missing)
    # Row and column labels are the block sizes.
    labels = [t.text for t in svg_tree(heat[0]["svg"]).iter("text")]
    assert labels.count("1024") >= 2 and "BQ" in labels and "BKV" in labels


def test_heatmaps_with_one_series_per_sparsity():
    """Series named after the sparsity (s0.5) give the same three heatmaps, titled once."""
    recs = block_shape_sweep(sparsities=(0.3, 0.5, 0.8, 0.9))
    for r in recs:
        r["bench"]["sweep"] = {"name": "block_shape", "series": f"s{r['params']['s']}",
                               "x": f"{r['params']['bq']}x{r['params']['bkv']}"}
    heat = family(bench_context(recs), "block_sparse")["charts"]
    assert [svg_tree(c["svg"]).findtext("text") for c in heat] == [
        f"block_sparse s={s} · vs dense_kernel" for s in (0.3, 0.5, 0.8)]


def test_heatmap_uses_the_first_baseline_without_dense_kernel():
    recs = block_shape_sweep(sparsities=(0.5,))
    for r in recs:
        r["bench"]["baselines"] = {"sdpa_cudnn": r["bench"]["baselines"]["dense_kernel"]}
        r["bench"]["speedup"] = {"sdpa_cudnn": r["bench"]["speedup"]["dense_kernel"]}
    [chart] = family(bench_context(recs), "block_sparse")["charts"]
    assert "vs sdpa_cudnn" in svg_tree(chart["svg"]).findtext("text")


def test_heat_colour_scale():
    assert heat_colour(1.0) == "#ffffff"
    assert heat_colour(8.0) == heat_colour(100.0) == "#1a7f37"  # capped
    assert heat_colour(1 / 8) == "#cf222e"


def test_context_chart_log_axes_kernel_and_each_baseline():
    fam = family(bench_context(context_sweep()), "decode")
    [chart] = [c for c in fam["charts"] if c["kind"] == "context"]
    svg = svg_tree(chart["svg"])
    labels = [g.get("data-label") for g in svg.findall(".//g[@class='series']")]
    assert labels == ["kernel", "torch reference", "SDPA flash", "SDPA cuDNN"]
    texts = {t.text for t in svg.iter("text")}
    assert {"1k", "4k", "16k", "32k"} <= texts  # log2 x axis
    assert "median latency (ms)" in texts and "context length (tokens)" in texts


def test_line_chart_drops_what_a_log_axis_cannot_show():
    chart = line_chart("t", [Line("a", [(1, 0.0), (2, None), (4, 2.0), (float("nan"), 1.0)]), Line("b", [])],
                       Axis("x", 2), Axis("y", 10))
    svg = svg_tree(chart)
    [series] = svg.findall(".//g[@class='series']")
    assert len(series.findall("circle")) == 1
    assert line_chart("t", [Line("a", [(1, -1.0)])], Axis("x", 2), Axis("y", 10)) is None


def test_rows_sort_numbers_as_numbers():
    recs = context_sweep()[::-1] + kept_ratio_sweep()[::-1]
    ctx = bench_context(recs)
    assert [r["case_id"].rsplit("-", 1)[1] for r in family(ctx, "decode")["rows"]] == \
        ["S1024]", "S4096]", "S16384]", "S32768]"]
    assert [r["case_id"].rsplit("-", 1)[1] for r in family(ctx, "sparse_decode")["rows"]] == \
        [f"kept{k}]" for k in KEPT]


def test_ticks_and_context_labels():
    assert log_ticks(0.008, 1.2, 10) == [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1]
    assert log_ticks(900, 140000, 2) == [2 ** k for k in range(10, 18)]
    assert log_ticks(100, 1.1e6, 2) == [2 ** k for k in range(7, 21, 2)]  # thinned: every other power
    assert [fmt_context(n) for n in (1024, 32768, 131072, 1 << 20, 1000)] == ["1k", "32k", "128k", "1M", "1000"]


def test_every_chart_is_well_formed_xml_and_names_are_escaped():
    evil = '<fam&"ily>'
    recs = []
    for r in kept_ratio_sweep(series='S<32000> & "more"') + context_sweep(series="<b>") + block_shape_sweep():
        r["family"] = evil
        r["case_id"] = evil + r["case_id"]
        recs.append(r)
    recs[0]["bench"]["baselines"]["x<y"] = {"median_ms": 1.0, "note": "<script>alert(1)</script>"}
    ctx = bench_context(recs)
    [fam] = ctx["families"]
    assert len(fam["charts"]) == 1 + 3 + 1
    for chart in fam["charts"]:
        svg = svg_tree(chart["svg"])  # raises on a stray < or &
        assert svg.tag == "svg"
    html = render_html(recs)
    assert "<script>alert" not in html.lower() and len(re.findall("<script", html)) == 1
    assert "&lt;fam&amp;" in html and "<fam&" not in html
    assert "S&lt;32000&gt; &amp; &quot;more&quot;" in html  # legend title and data-label
    assert 'id="bench-fam-ily"' in html  # the anchor is slugged


def test_page_with_benchmarks_stays_self_contained():
    html = render_html(context_sweep() + kept_ratio_sweep() + block_shape_sweep()
                       + [conformance_record("decode[a]")])
    assert html.count("<svg") == 5
    assert "http://" not in html and "https://" not in html  # no xmlns URL either
    assert not re.search(r"<(?:link|img|iframe|object|embed)\b|<script[^>]*src", html, re.I)
    assert "url(" not in html and "@import" not in html
    assert not re.search(r"<(?:use|image)\b|href=", section_html(html, "benchmarks"))


# --------------------------------------------------------------------------- records schema 2


def _timed(median_ms: float, host_us: float, method: str = "cudagraph", **extra) -> dict:
    """A schema 2 timed callable: device time, host time per call and latency apart."""
    return {"device": dict(_stats(median_ms), min_ms=median_ms * 0.97), "method": method,
            "host_us": {"median": host_us, "q1": host_us * 0.95, "q3": host_us * 1.1, "runs": 100},
            "latency_ms": median_ms + host_us / 1000, "l2": "cold", "note": None, **extra}


def bench_record_v2(case_id: str, *, kernel_ms: float = 0.05, host_us: float = 40.0,
                    baselines: dict | None = None, repeat: tuple | None = None,
                    device: str = "cuda", method: str = "cudagraph", **extra) -> dict:
    rec = bench_record(case_id, device=device, **extra)
    rec["schema"] = 2
    bases = {name: _timed(ms, 25.0, method) if not isinstance(ms, dict) else ms
             for name, ms in (baselines or {}).items()}
    rec["bench"] = {"kernel": _timed(kernel_ms, host_us, method, compile_s=2.25), "baselines": bases,
                    "speedup": {n: b["device"]["median_ms"] / kernel_ms for n, b in bases.items() if "device" in b},
                    "config": {"BLOCK_N": 64}, "sweep": None, "gbps": 2100.0, "copy_gbps": 3000.0}
    if repeat:
        a, b = repeat
        spread = abs(a - b) / min(a, b)
        rec["bench"]["repeat"] = {"device_median_ms": [a, b], "spread": spread, "flagged": spread > 0.10}
    return rec


def test_schema_2_device_host_and_latency_are_separate_columns_with_the_method_named():
    recs = [bench_record_v2("decode[fp16-B1-S32000]", kernel_ms=0.0669, host_us=131.0,
                            baselines={"sdpa_cudnn": 0.0636, "reference": {"unavailable": "too slow"}}),
            bench_record_v2("decode[fp16-B8-S1024]", kernel_ms=0.0242, host_us=38.0,
                            baselines={"sdpa_cudnn": 0.0221}, repeat=(0.0242, 0.0300))]
    html = render_html(recs)
    header, sub, long_ctx, short = table_rows(html, "tbl-bench-decode")
    assert header[:6] == ["Case", "Device", "Kernel ms", "Host µs", "Latency ms", "torch reference"]
    assert "TFLOP/s" not in header and "GB/s" in header
    long_ctx = dict(zip(header[:5], long_ctx))
    assert long_ctx["Kernel ms"] == "0.0669 ± 0.0027"
    assert long_ctx["Host µs"] == "131 ± 20"  # q3 - q1 = 144.1 - 124.45
    assert long_ctx["Latency ms"] == "0.198"
    # Speedups come from device medians: 0.0636 / 0.0669.
    assert re.search(r'<span class="slower">0.951×</span>', html)
    assert "device time: CUDA graph replay (cuda)" in html
    assert "Speedups, TFLOP/s and GB/s use device time" in html
    # The case timed twice 24% apart is flagged in its row and in the section's banner.
    assert "repeat ±24%" in short[2]
    assert re.search(r'moved more than 10% between two timings.*decode\[fp16-B8-S1024\]</a> \(24%\)', html, re.S)
    [fam] = bench_context(recs)["families"]
    assert [r["case_id"] for r in fam["unstable"]] == ["decode[fp16-B8-S1024]"]


def test_schema_1_and_2_records_share_one_table():
    old = bench_record("decode[old]", kernel_ms=0.1, baselines={"sdpa_cudnn": 0.2})
    new = bench_record_v2("decode[new]", kernel_ms=0.1, baselines={"sdpa_cudnn": 0.05}, method="events")
    html = render_html([old, new])
    header, sub, *rows = table_rows(html, "tbl-bench-decode")
    by_case = {r[0]: dict(zip(["Case", "Device", "Kernel ms", "Host µs", "Latency ms"], r)) for r in rows}
    assert by_case["decode[old]"]["Host µs"] == "—" and by_case["decode[new]"]["Host µs"] == "40 ± 6"
    assert speedup(old, "sdpa_cudnn") == pytest.approx(2.0) and speedup(new, "sdpa_cudnn") == pytest.approx(0.5)
    assert "device time: device events (cuda)" in html  # schema 1 was timed with events
