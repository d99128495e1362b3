"""The report in a real browser: headless Chromium loads a page rendered by the CLI from
conformance, quality and benchmark records, logs no console messages, has every section and
chart in its DOM, and leaves a screenshot in reports/screenshot.png for a human to look at.

Skips when no Chromium is installed, except under CI (CI or ATTN_REQUIRE_CHROMIUM set: .ci/run
installs Chromium, so a missing browser there is a broken setup, not a reason to skip). tox
does not pass CI through to the tests, hence the second variable.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

from attnsuite.records import read_records
from attnsuite.report.bench import bench_context
from tests.test_report_bench import (
    GATHER_NOTE,
    bench_record,
    block_shape_sweep,
    conformance_record,
    context_sweep,
    kept_ratio_sweep,
)

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = ROOT / "reports" / "screenshot.png"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
BROWSER_TIMEOUT_S = 60
WINDOW = (1400, 5200)
SECTIONS = ("runs", "environment", "outcomes", "matrix", "benchmarks", "tight", "quality", "cases")


# --------------------------------------------------------------------------- the browser


@pytest.fixture(scope="module")
def chromium() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    wanted = " or ".join(BROWSERS)
    if os.environ.get("CI") or os.environ.get("ATTN_REQUIRE_CHROMIUM"):
        pytest.fail(f"no {wanted} on PATH, but this is CI (CI/ATTN_REQUIRE_CHROMIUM set), "
                    f"where .ci/run installs chromium: the browser check would silently not run")
    pytest.skip(f"no {wanted} on PATH: install chromium to check the report in a browser")


def run_browser(binary: str, profile: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    """One headless Chromium run. Chromium forks helpers (zygote, GPU, renderer), so it runs in
    its own process group and a hang kills the whole group, not just the launcher."""
    cmd = [binary, "--headless=new", "--disable-gpu", "--no-sandbox", "--disable-dev-shm-usage",
           "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}",
           "--enable-logging=stderr", "--v=0", *args, url]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=BROWSER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"chromium did not finish within {BROWSER_TIMEOUT_S} s: {' '.join(cmd)}\n{err[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def console_messages(stderr: str) -> list[str]:
    """Console output Chromium logged for the page. The report has no scripts, so anything here
    (a resource that failed to load, a blocked request, an uncaught error) is a defect."""
    return [line for line in stderr.splitlines() if re.search(r":CONSOLE[:(]|Uncaught", line)]


# --------------------------------------------------------------------------- the report


def records() -> tuple[list[dict], list[dict]]:
    """Conformance records from a cpu run, and bench records from a cuda and an npu host."""
    conformance = [
        conformance_record("prefill[fp16-B2-Hq8-Hkv2-S17-D64-causal]"),
        conformance_record("prefill[bf16-B1-Hq4-Hkv4-S128-D128-full]", outcome="xfail",
                           message="interpreter bf16 tl.dot", stage="numeric"),
        conformance_record("decode[fp16-B1-Hq8-Hkv2-S33-D64]", headroom=1.1),
        conformance_record("decode[fp16-B3-Hq4-Hkv4-S1-D128]", outcome="fail"),
        conformance_record("mustafar[decode-s0.7-b2]", quality={
            "op": "decode", "sparsity": 0.7, "bits": 2, "compression_ratio": 0.21, "cosine": 0.97}),
    ]
    bench = [
        bench_record("prefill[fp16-B8-Hkv16-G4-S1024-D64-causal]", kernel_ms=0.344, iqr_ms=0.006,
                     baselines={"reference": 25.8, "sdpa_flash": 0.323, "sdpa_cudnn": 0.204},
                     tflops=212.0, config={"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}),
        bench_record("prefill[fp16-B8-Hkv16-G4-S1024-D64-causal]", device="npu", host="ascend-7",
                     kernel_ms=57.9, baselines={"reference": 25.8, "npu_fusion_attention": 1.2},
                     tflops=1.2, config={"BLOCK_M": 64, "BLOCK_N": 128}),
        bench_record("prefill[bf16-B1-Hq32-Hkv8-S16384-D128-causal]", kernel_ms=None, outcome="skip",
                     message="cudnn backend unavailable in this torch build"),
        *context_sweep(),
        *kept_ratio_sweep(series="S32000-D128"),
        *kept_ratio_sweep(series="S89600-D256", overhead_ms=0.02),
        *block_shape_sweep(missing=((1024, 1024), (512, 1024))),
        bench_record("mustafar[keys-Sc32768-s0.7-b2]", kernel_ms=0.021,
                     baselines={"dense_qk": 0.058, "reference": (4.1, "dense fp32 reference")}, gbps=1450.0,
                     copy_gbps=3030.0, copy_fraction=1450.0 / 3030.0),
        bench_record("sparse_paged_decode[bench-kept0.02]", kernel_ms=0.081,
                     baselines={"reference": 7716.0, "sdpa_cudnn": (0.27, GATHER_NOTE),
                                "npu_fused_infer_attention_score": {"unavailable": "cuda device"}},
                     gbps=640.0, copy_gbps=3030.0),
    ]
    return conformance, bench


def write_run(run_dir: Path, recs: list[dict]) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "gw0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return run_dir


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """The page, rendered by the CLI from three run directories."""
    tmp = tmp_path_factory.mktemp("browser")
    conformance, bench = records()
    runs = [write_run(tmp / "runs" / "cpu-20261121", conformance),
            write_run(tmp / "runs" / "cuda-bench-20261121", [r for r in bench if r["device"] == "cuda"]),
            write_run(tmp / "runs" / "npu-bench-20261121", [r for r in bench if r["device"] == "npu"])]
    out = tmp / "index.html"
    res = subprocess.run([sys.executable, "-m", "attnsuite.report", *map(str, runs), "-o", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return out


class _Dom(HTMLParser):
    """Ids, tag counts and class counts of a serialized DOM."""

    def __init__(self):
        super().__init__()
        self.ids: list[str] = []
        self.tags: Counter = Counter()
        self.classes: Counter = Counter()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags[tag] += 1
        if attrs.get("id"):
            self.ids.append(attrs["id"])
        for cls in (attrs.get("class") or "").split():
            self.classes[(tag, cls)] += 1


# --------------------------------------------------------------------------- tests


def test_console_check_sees_a_planted_error(chromium, tmp_path):
    """The console check reads what this Chromium actually logs (otherwise the next test could
    pass by never matching anything)."""
    page = tmp_path / "planted.html"
    page.write_text("<!DOCTYPE html><p>x</p><script>console.error('planted'); nosuchfn();</script>")
    res = run_browser(chromium, tmp_path / "profile", page.as_uri(), "--dump-dom")
    found = console_messages(res.stderr)
    assert any("planted" in m for m in found), res.stderr[-3000:]
    assert any("Uncaught ReferenceError" in m for m in found), res.stderr[-3000:]


def test_report_in_chromium(chromium, report, tmp_path):
    res = run_browser(chromium, tmp_path / "profile", report.as_uri(), "--dump-dom")
    assert res.returncode == 0, res.stderr[-3000:]
    assert console_messages(res.stderr) == []

    dom = _Dom()
    dom.feed(res.stdout)
    for section in SECTIONS:
        assert section in dom.ids, f"section {section} missing from the DOM"
    assert len(dom.ids) == len(set(dom.ids)), "duplicate ids"

    # Every chart the view model built reached the DOM as SVG, with its series and cells.
    charts = [c for f in bench_context(read_records([report.parent / "runs"]))["families"] for c in f["charts"]]
    kinds = Counter(c["kind"] for c in charts)
    assert kinds == {"kept_ratio": 1, "block_shape": 3, "context": 1}
    assert dom.tags["svg"] == len(charts)
    assert dom.classes[("svg", "chart-heat")] == 3 and dom.classes[("svg", "chart-line")] == 2
    assert dom.classes[("g", "cell")] == 3 * 16
    # kept ratio: 2 series x 3 baselines; context: kernel + 3 baselines.
    assert dom.classes[("g", "series")] == dom.tags["polyline"] == 6 + 4
    families = ("block_sparse", "decode", "mustafar", "prefill", "sparse_decode", "sparse_paged_decode")
    assert dom.classes[("table", "bench")] == len(families)
    for family in families:
        assert f"bench-{family}" in dom.ids
    assert "ascend-7" in res.stdout and "h100-a" in res.stdout


def test_screenshot(chromium, report, tmp_path):
    SCREENSHOT.parent.mkdir(exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    res = run_browser(chromium, tmp_path / "profile", report.as_uri(),
                      f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--screenshot={SCREENSHOT}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert console_messages(res.stderr) == []
    data = SCREENSHOT.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == WINDOW  # IHDR: width, height
    assert len(data) > 10_000, f"{SCREENSHOT} is only {len(data)} bytes: a blank page?"
