"""The report in a real browser. Headless Chromium loads a page rendered by the CLI from the
session's quick cpu run (tests/conftest.py ``quick_cpu_run``) merged with a GPU-like run
synthesized here from the records schema (there is no GPU on CI), compile-only npu records with
hazards, and benchmark records with every chart. It checks that the page logs no console
message under its own content security policy, that every section is there, that the filter
bar hides exactly the rows it should (from the URL and from the controls), that links reveal
folded cases, and that the page is short; it leaves screenshots in reports/ for a human.

Skips when no Chromium is installed, except under CI (CI or ATTN_REQUIRE_CHROMIUM set: .ci/run
installs Chromium, so a missing browser there is a broken setup, not a reason to skip). tox
does not pass CI through to the tests, hence the second variable.
"""
from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
from collections import Counter
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from attnsuite.report.bench import bench_context
from attnsuite.report.load import load, merge
from attnsuite.report.rows import case_anchor
from attnsuite.report.timing import SLOWEST
from tests.conftest import made_once
from tests.test_report_bench import (
    GATHER_NOTE,
    bench_record,
    bench_record_v2,
    block_shape_sweep,
    context_sweep,
    kept_ratio_sweep,
)

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = ROOT / "reports" / "screenshot.png"
SCREENSHOT_FILTERED = ROOT / "reports" / "screenshot-filtered.png"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
BROWSER_TIMEOUT_S = 90
WINDOW = (1400, 2400)
SECTIONS = ("runs", "environment", "outcomes", "matrix", "known-failures", "benchmarks", "tight", "quality", "cases",
            "timing", "hazards")
#: The quick cpu page was ~44,000 px tall with every row expanded; folded, it must stay within
#: a few screens even merged with a GPU run of the same cases.
MAX_PAGE_PX = 12_000
H100 = {"python": "3.11.7", "torch": "2.11.0+cu130", "triton": "3.6.0", "triton_backend": "cuda",
        "device_name": "NVIDIA H100 80GB HBM3", "driver": "580.159.04", "host": "h100-a", "platform": "linux"}


# --------------------------------------------------------------------------- the browser


@pytest.fixture(scope="session")
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
    """Console output Chromium logged for the page: a blocked script or request (the content
    security policy), an uncaught error. Anything here is a defect."""
    return [line for line in stderr.splitlines()
            if re.search(r":CONSOLE[:(]|Uncaught|Content Security Policy|Refused to", line)]


def with_probe(page: Path, probe: str, out: Path) -> Path:
    """A copy of the page that also runs ``probe`` after the report's own script. The probe is
    allowed the way the page's script is, by adding its hash to the policy, so the page is
    tested under its own content security policy."""
    html = page.read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(probe.encode()).digest()).decode()
    html, n = re.subn(r"(script-src [^;\"]*)", rf"\1 'sha256-{digest}'", html, count=1)
    assert n == 1, "the page has no script-src policy"
    out.write_text(html.replace("</body>", f"<script>{probe}</script></body>"), encoding="utf-8")
    return out


def probe_results(chromium: str, page: Path, tmp_path: Path, probe: str, query: str = "") -> dict:
    """Run a probe that stores a JSON object in ``document.body.dataset.probe``; returns it."""
    copy_path = with_probe(page, probe, tmp_path / f"probe-{hashlib.sha1(probe.encode()).hexdigest()[:8]}.html")
    res = run_browser(chromium, tmp_path / "profile", copy_path.as_uri() + query, "--window-size=1400,1000",
                      "--dump-dom")
    assert res.returncode == 0, res.stderr[-3000:]
    assert console_messages(res.stderr) == [], console_messages(res.stderr)
    m = re.search(r'<body[^>]*\sdata-probe="([^"]*)"', res.stdout)
    assert m, "the probe did not report (did the page's script fail?)"
    return json.loads(unescape(m.group(1)))


#: Visible rows and the page height, as a probe reports them.
STATE_JS = ("function shown(el){return el.checkVisibility();}"  # closed <details> and hidden ancestors
            "function state(){var rows=[].slice.call(document.querySelectorAll('[data-row]'));"
            "var seen=rows.filter(shown);"
            "return {height:document.documentElement.scrollHeight,rows:rows.length,"
            "matching:rows.filter(function(r){return !r.hidden;}).length,"
            "visible:seen.map(function(r){return [r.id,r.dataset.family,r.dataset.device,r.dataset.impl,"
            "r.dataset.outcome,r.dataset.mode];})};}")


def probe(body: str) -> str:
    return STATE_JS + "var out={};" + body + ";document.body.dataset.probe=JSON.stringify(out);"


# --------------------------------------------------------------------------- the records


def gpu_like(cpu_records: list[dict]) -> list[dict]:
    """A cuda run of the same cases as records schema 2 would hold it: the interpreter's bf16
    xfails pass on a GPU, times are small, every numeric case has its phases, and a few cases
    end in each outcome a device run adds (fail, oom, not_run, a timeout after 301 s)."""
    out = []
    for i, src in enumerate(sorted(cpu_records, key=lambda r: r["case_id"])):
        if src.get("mode", "numeric") != "numeric" or not src.get("impl"):
            continue
        r = copy.deepcopy(src)
        r.update(schema=2, device="cuda", run_id="cuda-20261124-090000-1", worker=f"gw{i % 4}",
                 device_index=i % 2, env=dict(H100), duration_s=0.05 + 0.001 * i,
                 repro=src["repro"].replace("--device cpu", "--device cuda"), known_failure=None,
                 outcome="pass" if src["outcome"] in ("pass", "xfail") else src["outcome"],
                 phases={"inputs": 0.01, "first_call": 0.02 + 0.001 * i, "impl": 0.001,
                         "reference": 0.012, "compare": 0.002})
        if src["outcome"] == "xfail":  # the interpreter's bf16 bug: a GPU computes these right
            r.update(headroom=3.0, metrics={"o": {"max_abs_err": 1e-3, "allowed": 3e-3, "headroom": 3.0}})
        if r["outcome"] == "pass":
            r.update(stage=None, message=None)
        out.append(r)
    decode = [r for r in out if r["family"] == "decode"]
    decode[0].update(outcome="fail", stage="numeric", headroom=0.4,
                     message="o: max abs err 3.1e-02 > allowed 1.2e-02 (headroom 0.4)\nat (0, 3, 5)")
    decode[1].update(outcome="oom", stage="launch", message="CUDA out of memory. Tried to allocate 2.00 GiB",
                     metrics={}, headroom=None)
    decode[2].update(outcome="not_run", stage=None, message="xdist's restart budget ran out before this case ran",
                     metrics={}, headroom=None, duration_s=None, phases={})
    prefill = [r for r in out if r["family"] == "prefill"]
    prefill[0].update(outcome="timeout", stage="launch", duration_s=300.2, elapsed_s=301.0,
                      message="Timeout (>300.0s) from pytest-timeout.", metrics={}, headroom=None, phases={})
    prefill[1].update(headroom=1.1)
    return out


def npu_compile(cpu_records: list[dict]) -> list[dict]:
    """Compile-only npu records for the decode cases, two with flagged hazards."""
    out = []
    decode = [r for r in cpu_records if r["family"] == "decode" and r.get("impl")]
    for i, src in enumerate(decode):
        r = copy.deepcopy(src)
        flagged = i < 2
        hazards = {"grid": {"programs": 7 if flagged else 48, "ai_cores": 24, "vector_cores": 48,
                            "ratio": 7 / 24 if flagged else 2.0, "flagged": flagged},
                   "accesses": {"scalar": 4 if flagged else 0, "row_gather": 0,
                                "sites": [{"kind": "scalar", "line": "kernels/decode.py:88", "count": 4}]
                                if flagged else []},
                   "ub": {"bytes": 60000, "capacity": 196608, "percent": 30.5, "flagged": False}}
        r.update(schema=2, device="npu", mode="compile", run_id="npu-compile-20261124", outcome="pass",
                 stage=None, message=None, metrics={}, headroom=None, known_failure=None,
                 compile={"Ascend910B2": [{"kernel": "_decode_fwd", "outcome": "pass", "stage": None,
                                           "last_stage_reached": "bishengir (hivmc missing)", "hazards": hazards}]})
        out.append(r)
    return out


def benchmarks() -> list[dict]:
    """Bench records from a cuda and an npu host: every chart kind, both schemas, a repeat."""
    return [
        bench_record_v2("prefill[fp16-B8-Hkv16-G4-S1024-D64-causal]", kernel_ms=0.344, host_us=52.0,
                        baselines={"reference": 25.8, "sdpa_flash": 0.323, "sdpa_cudnn": 0.204},
                        repeat=(0.344, 0.401)),
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


def write_run(run_dir: Path, recs: list[dict], status: dict | None = None) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "gw0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    if status is not None:
        (run_dir / "run.json").write_text(json.dumps(status), encoding="utf-8")
    return run_dir


# Session-scoped: the slow tests run first and in between these (tests/conftest.py), which
# would tear a module's fixtures down and render the page again each time. Made once for the
# workers together (``made_once``): this module's tests go to both.
@pytest.fixture(scope="session")
def runs(quick_cpu_run, tmp_path_factory, request) -> list[Path]:
    assert quick_cpu_run.records, quick_cpu_run.output[-3000:]

    def make(tmp: Path) -> dict:
        cpu = quick_cpu_run.report.parent / "records"
        cuda_records = gpu_like(quick_cpu_run.records)
        cuda = write_run(tmp / "runs" / "cuda-20261124-090000-1", cuda_records, status={
            "run_id": "cuda-20261124-090000-1", "collected": len(cuda_records) + 3, "recorded": len(cuda_records),
            "interrupted": "SIGTERM", "not_run_reason": "the job's time limit ended the run",
            "finished_at": "2026-11-24T09:05:00+00:00"})
        npu = write_run(tmp / "runs" / "npu-compile-20261124", npu_compile(quick_cpu_run.records))
        bench = write_run(tmp / "runs" / "bench-20261124", benchmarks())
        return {"runs": [str(p) for p in (cpu, cuda, npu, bench)]}

    return [Path(p) for p in made_once(request, tmp_path_factory, "browser", make)[1]["runs"]]


@pytest.fixture(scope="session")
def report(runs, tmp_path_factory, request) -> Path:
    """The page, rendered by the CLI from the four run directories."""
    def make(where: Path) -> dict:
        out = where / "index.html"
        res = subprocess.run([sys.executable, "-m", "attnsuite.report", *map(str, runs), "-o", str(out)],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        return {"page": str(out)}

    return Path(made_once(request, tmp_path_factory, "page", make)[1]["page"])


@pytest.fixture(scope="session")
def merged(runs) -> list[dict]:
    return merge(load(runs).records)


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
    """The console check reads what this Chromium actually logs (otherwise the next tests could
    pass by never matching anything), including a script the page's policy refuses."""
    page = tmp_path / "planted.html"
    page.write_text("<!DOCTYPE html><p>x</p><script>console.error('planted'); nosuchfn();</script>")
    res = run_browser(chromium, tmp_path / "profile", page.as_uri(), "--dump-dom")
    found = console_messages(res.stderr)
    assert any("planted" in m for m in found), res.stderr[-3000:]
    assert any("Uncaught ReferenceError" in m for m in found), res.stderr[-3000:]
    blocked = tmp_path / "blocked.html"
    blocked.write_text("<!DOCTYPE html><meta http-equiv=\"Content-Security-Policy\" content=\"script-src "
                       "'none'\"><p>x</p><script>document.title='ran'</script>")
    res = run_browser(chromium, tmp_path / "profile", blocked.as_uri(), "--dump-dom")
    assert "<title>ran</title>" not in res.stdout and console_messages(res.stderr), res.stderr[-3000:]


def test_report_in_chromium(chromium, report, runs, tmp_path):
    res = run_browser(chromium, tmp_path / "profile", report.as_uri(), "--dump-dom")
    assert res.returncode == 0, res.stderr[-3000:]
    assert console_messages(res.stderr) == []

    dom = _Dom()
    dom.feed(res.stdout)
    for section in SECTIONS:
        assert section in dom.ids, f"section {section} missing from the DOM"
    assert len(dom.ids) == len(set(dom.ids)), "duplicate ids"
    # The script ran: the filter bar is shown and the copy buttons with it.
    assert re.search(r'<nav id="filters" (?![^>]*hidden)', res.stdout)
    assert not re.search(r'<button type="button" class="copy" hidden', res.stdout)

    # Every chart the view model built reached the DOM as SVG, with its series and cells.
    charts = [c for f in bench_context(load(runs).records)["families"] for c in f["charts"]]
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
    # The GPU run's status, its device-only outcomes, the hazards and the repeat flag are shown.
    assert "cuda-20261124-090000-1: interrupted (SIGTERM)" in res.stdout
    assert dom.classes[("tbody", "warn")] == 2  # oom, not_run
    assert "repeat ±17%" in res.stdout
    assert "Timings need a device run." not in res.stdout


def visible(state: dict) -> list[list]:
    return state["visible"]


def test_filters_from_the_url_hide_exactly_the_other_rows(chromium, report, merged, tmp_path):
    everything = probe_results(chromium, report, tmp_path, probe("out.all=state()"))["all"]
    got = probe_results(chromium, report, tmp_path,
                        probe("out.s=state();out.tight=document.querySelector('#tight table').hidden"), "?outcome=fail")
    fails = got["s"]
    assert got["tight"] is True  # a list with no matching row goes, header and all
    assert fails["rows"] == everything["rows"]
    # Every visible row is a failure, and every failing case's own row is visible.
    assert visible(fails) and all(row[4] == "fail" for row in visible(fails))
    expected = {case_anchor(r) for r in merged if r["outcome"] == "fail"}
    assert expected and expected <= {row[0] for row in visible(fails)}
    assert len(visible(fails)) < len(visible(everything)) / 10
    assert fails["height"] < everything["height"]

    two = probe_results(chromium, report, tmp_path, probe("out.s=state()"),
                        "?family=decode&device=cuda&outcome=pass")["s"]
    rows = visible(two)
    assert rows and all(r[1:3] == ["decode", "cuda"] and r[4] == "pass" for r in rows)
    # outcome=pass opens the folded passing tables: each passing decode case on cuda is shown.
    assert {case_anchor(r) for r in merged if r["family"] == "decode" and r["device"] == "cuda"
            and r["outcome"] == "pass" and r.get("mode") == "numeric"} <= {r[0] for r in rows}


def test_filter_controls_links_and_reveal(chromium, report, merged, tmp_path):
    """The controls themselves: choosing a value, a count link, reset, and a link to a case
    folded away inside the passing rows."""
    tight = next(r for r in merged if r["device"] == "cuda" and r["family"] == "prefill" and r.get("headroom") == 1.1)
    body = (
        "var s=document.querySelector('select[data-dim=mode]');s.value='compile';"
        "s.dispatchEvent(new Event('change'));out.compile=state();out.status=document.getElementById('filter-status').textContent;"
        "document.getElementById('filter-reset').click();out.reset=state();"
        "document.querySelector('#matrix a.badge.o-oom').click();out.oom=state();"
        "out.query=location.search;"
        "document.getElementById('filter-reset').click();"
        f"var link=document.querySelector('#tight a[href=\"#{case_anchor(tight)}\"]');"
        f"var row=document.getElementById('{case_anchor(tight)}');"
        "out.folded=!shown(row);link.click();out.revealed=shown(row);"
    )
    got = probe_results(chromium, report, tmp_path, probe(body))
    compile_rows = visible(got["compile"])
    assert compile_rows and all(r[5] == "compile" and r[2] == "npu" for r in compile_rows)
    # 16 of them are in a folded table: the filter matches them, the fold still hides them.
    assert got["status"] == f"{got['compile']['matching']} of {got['compile']['rows']} rows match"
    assert got["compile"]["matching"] == len(npu_compile_rows(merged))
    assert len(visible(got["reset"])) > len(compile_rows)
    oom = visible(got["oom"])
    assert oom and all(r[4] == "oom" for r in oom)
    assert "outcome=oom" in got["query"]
    assert got["folded"] is True and got["revealed"] is True


def npu_compile_rows(merged: list[dict]) -> list[dict]:
    """The rows a mode=compile filter matches: each compile record's case row, the hazard
    list's rows of the flagged ones, and the slowest compiles."""
    recs = [r for r in merged if r.get("mode") == "compile"]
    flagged = [r for r in recs if any(x.get("hazards", {}).get("grid", {}).get("flagged")
                                      for links in r["compile"].values() for x in links)]
    return recs + flagged + recs[:SLOWEST]


def test_page_is_short_folded_and_shorter_filtered(chromium, report, tmp_path):
    body = ("out.folded=state().height;document.getElementById('expand-passing').click();"
            "out.expanded=state().height;")
    got = probe_results(chromium, report, tmp_path, probe(body))
    assert got["folded"] < MAX_PAGE_PX, got
    assert got["folded"] * 2 < got["expanded"], got  # passes are most of a page, and fold away
    filtered = probe_results(chromium, report, tmp_path, probe("out.h=state().height"), "?family=mustafar")
    assert filtered["h"] < got["folded"]


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])  # IHDR: width, height


def test_screenshots(chromium, report, tmp_path):
    SCREENSHOT.parent.mkdir(exist_ok=True)
    shots = {}
    for path, query in ((SCREENSHOT, ""), (SCREENSHOT_FILTERED, "?family=decode&outcome=fail")):
        path.unlink(missing_ok=True)
        res = run_browser(chromium, tmp_path / "profile", report.as_uri() + query,
                          f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--screenshot={path}")
        assert res.returncode == 0, res.stderr[-3000:]
        assert console_messages(res.stderr) == []
        assert _png_size(path) == WINDOW
        shots[query] = path.read_bytes()
        assert len(shots[query]) > 20_000, f"{path} is only {len(shots[query])} bytes: a blank page?"
    # The filter changed what is on the screen.
    assert shots[""] != shots["?family=decode&outcome=fail"]
