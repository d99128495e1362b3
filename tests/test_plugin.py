"""The plugin end to end, through real pytest runs in a subprocess."""
import json

import pytest

from attnsuite import registry

from attnsuite.records import SCHEMA

DECODE_CASE = "cases/decode.py::decode[fp16-B2-Hq8-Hkv2-S17-D64-lse]"


def test_quick_profile_under_xdist_passes_records_every_case_and_writes_the_report(quick_cpu_run):
    run = quick_cpu_run
    assert run.returncode == 0, run.output[-3000:]
    outcomes = run.outcomes()
    assert set(outcomes.values()) <= {"pass", "xfail", "skip"}
    # The only skips are the block-sparse cases the spec says to skip, recorded with the reason.
    skipped = [r for r in run.records if r["outcome"] == "skip"]
    assert skipped and all(r["family"] == "block_sparse" and "blocks per row" in r["message"]
                           for r in skipped)
    assert {r["family"] for r in run.records} >= {"prefill", "decode", "probes", "block_sparse"}
    assert {r["worker"] for r in run.records} == {"gw0", "gw1"}
    assert all(r["env"]["triton"] and r["env"]["torch"] for r in run.records)
    for r in run.records:
        if r["outcome"] == "pass":
            # A set-valued output (the top-k indexer's indices: the family's own comparison)
            # allows no violation at all; every numeric output has a tolerance above 0.
            set_valued = registry.family(r["family"]).compare is not None
            assert r["headroom"] >= 1 and all(m["allowed"] > 0 or set_valued for m in r["metrics"].values())
        assert r["repro"].startswith("pytest '") and "--device cpu" in r["repro"]
    xfails = [r for r in run.records if r["outcome"] == "xfail"]
    assert xfails and all(r["known_failure"]["note"] for r in xfails)  # every xfail is a ledger entry
    assert "interp_bf16_dot" in {r["known_failure"]["id"] for r in xfails}
    html = run.report.read_text()
    assert "decode" in html and "prefill" in html
    # Every xfail links to its note, which the page carries (a link into the markdown file would not work).
    assert 'href="#kf-interp_bf16_dot"' in html and 'id="kf-interp_bf16_dot"' in html


def test_a_case_reproduces_alone_with_its_repro_command(run_suite, quick_cpu_run):
    run = run_suite(DECODE_CASE)
    (rec,) = run.records
    assert rec["outcome"] == "pass" and rec["case_id"] == "decode[fp16-B2-Hq8-Hkv2-S17-D64-lse]"
    # Alone, it gives the numbers it gave inside the whole xdist run: same id, same inputs.
    in_full_run = quick_cpu_run.by_case()[rec["case_id"]]
    assert in_full_run["metrics"] == rec["metrics"]


def test_a_hung_case_is_stopped_and_recorded_as_timeout(run_suite):
    run = run_suite(DECODE_CASE, "--impl", "decode=tests.planted:decode_hangs", "--case-timeout", "2")
    (rec,) = run.records
    assert rec["outcome"] == "timeout" and "Timeout" in rec["message"]


def test_stale_ledger_entry_turns_into_a_strict_xpass(run_suite):
    run = run_suite("cases/decode.py", "-k", "fp16 and S17", "-o", "attnsuite_ledger=tests/ledgers/stale.toml")
    assert run.records and {r["outcome"] for r in run.records} == {"xpass"}
    assert all("'stale_entry' looks stale" in r["message"] for r in run.records)
    assert run.returncode == 1


def test_ledger_does_not_hide_a_different_failure(run_suite):
    run = run_suite(DECODE_CASE, "--impl", "decode=tests.planted:decode_wrong_kv_head",
                    "-o", "attnsuite_ledger=tests/ledgers/other_message.toml")
    (rec,) = run.records
    assert rec["outcome"] == "fail" and rec["stage"] == "numeric"


@pytest.mark.parametrize("device,missing", [("cuda", "no usable CUDA GPU"), ("npu", "torch_npu")])
def test_unavailable_device_stops_at_once_with_one_line(run_suite, device, missing):
    run = run_suite("--device", device)
    assert run.returncode == 4
    errors = [line for line in run.output.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and missing in errors[0] and f"--device {device}" in errors[0]
    assert "Traceback" not in run.output and not run.records


def test_unavailable_device_under_xdist_also_stops_before_spawning(run_suite):
    run = run_suite("--device", "cuda", "-n", "2")
    assert run.returncode == 4 and "no usable CUDA GPU" in run.output
    assert "Traceback" not in run.output


def test_bad_impl_spec_is_a_usage_error(run_suite):
    run = run_suite(DECODE_CASE, "--impl", "decode=no.such.module:fn")
    assert run.returncode == 4 and "--impl" in run.output


def test_report_rerenders_and_merges_runs(run_suite, tmp_path):
    import subprocess
    import sys

    from tests.conftest import ROOT

    first = run_suite(DECODE_CASE)
    second = run_suite("cases/prefill.py", "-k", "S17 and fp16 and D64")
    dirs = [str(first.report.parent / "records"), str(second.report.parent / "records")]
    out = tmp_path / "merged.html"
    proc = subprocess.run([sys.executable, "-m", "attnsuite.report", *dirs, "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    html = out.read_text()
    assert "decode[fp16-B2-Hq8-Hkv2-S17-D64-lse]" in html and "prefill[fp16-B2-Hq2-Hkv2-S17-D64-causal-lse]" in html
    assert json.loads(json.dumps(first.records[0]))["schema"] == SCHEMA


@pytest.mark.parametrize("workers", [(), ("-n", "1")])
def test_a_collect_only_run_records_nothing_and_writes_no_report(run_suite, workers):
    """Nothing ran: no not_run records for every collected case, no run status, no report."""
    run = run_suite("cases/decode.py", "--collect-only", *workers)
    assert run.returncode == 0 and "decode[" in run.output, run.output[-2000:]
    assert run.records == [] and not run.report.exists()
    assert not (run.report.parent / "records").exists()


def test_benchmarks_skip_on_cpu_with_the_reason_and_are_recorded_as_bench(run_suite):
    run = run_suite("benchmarks", "-k", "decode")
    assert run.returncode == 0, run.output[-3000:]
    assert run.records and all(r["mode"] == "bench" and r["outcome"] == "skip" for r in run.records)
    assert all("Triton interpreter" in r["message"] for r in run.records)
    assert {r["family"] for r in run.records} >= {"decode", "paged_decode", "sparse_decode"}


def test_bench_selection_is_headline_cases_plus_sweeps_in_full():
    from attnsuite.bench.selection import bench_selection
    from cases.decode import FAMILY

    quick, full = bench_selection(FAMILY, "quick"), bench_selection(FAMILY, "full")
    assert quick and all("bench" in c.tags for c in quick)
    assert {c.id for c in quick} < {c.id for c in full}
    assert any("context" in c.tags for c in full)


@pytest.mark.parametrize("select", [("-m", "bench"), ("-k", "bench")])
def test_case_tags_select_with_m_and_k(select):
    from tests.conftest import ROOT
    from tests.processes import run_python

    out = run_python(["-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                      "--profile", "full", "cases/decode.py", *select], cwd=ROOT,
                     env={**__import__("os").environ, "PYTHONPATH": str(ROOT)}, timeout=300).stdout
    ids = [line for line in out.splitlines() if line.startswith("cases/decode.py::")]
    from cases.decode import FAMILY

    assert sorted(i.split("::")[1] for i in ids) == sorted(c.id for c in FAMILY.cases if "bench" in c.tags)


@pytest.mark.parametrize("select", [("-m", "not sweep", "-k", "decode"), ("-m", "sweep", "-k", "decode and bench")])
def test_benchmarks_select_by_case_tags_too(select):
    """A benchmark carries its case's tags as marks: a run can leave the sweeps out."""
    from tests.conftest import ROOT
    from tests.processes import run_python

    out = run_python(["-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                      "--strict-markers", "--profile", "full", "benchmarks", *select], cwd=ROOT,
                     env={**__import__("os").environ, "PYTHONPATH": str(ROOT)}, timeout=300).stdout
    ids = {line.split("[", 1)[1][:-1] for line in out.splitlines() if line.startswith("benchmarks/")}
    from attnsuite.bench.selection import bench_selection
    from cases.decode import FAMILY

    full = {c.id: c for c in bench_selection(FAMILY, "full")}
    sweeps = {i for i, c in full.items() if "sweep" in c.tags}
    wanted = sweeps if select[1] == "sweep" else set(full) - sweeps
    assert sweeps and wanted and ids & set(full) == wanted, out[-2000:]


def test_option_values_are_joined_for_the_workers(pytestconfig):
    from attnsuite.options import joined_option_values, value_options

    ours = value_options(pytestconfig._parser)
    assert {"--records-dir", "--report-html", "--impl", "--device", "--soc"} <= ours
    assert not {"--compile-only", "--autotune"} & ours  # flags take no value

    takes = {"--records-dir", "--impl"}
    assert joined_option_values(["-n", "2", "--records-dir", "/tmp/r", "--impl", "a=b:c", "-x",
                                 "--records-dir=/x", "--impl"], takes) == [
        "-n", "2", "--records-dir=/tmp/r", "--impl=a=b:c", "-x", "--records-dir=/x", "--impl"]


@pytest.mark.parametrize("omp,workers,cores,expected", [
    (None, 2, 16, 8), (None, 32, 16, 1), ("3", 2, 16, None), ("", 2, 16, 8), ("auto", 4, 16, 4)])
def test_workers_share_the_cores_unless_the_user_set_a_thread_count(monkeypatch, omp, workers, cores, expected):
    import torch

    from attnsuite.configure import share_cores

    set_to = []
    monkeypatch.setattr(torch, "set_num_threads", set_to.append)
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    share_cores(workers)
    assert set_to == ([] if expected is None else [expected])


def _entry_point_path(tmp_path, checkout: bool = True) -> str:
    """PYTHONPATH for a pytest that loads the plugin the way an installed attnsuite does, by its
    pytest11 entry point: a stand-in distribution declaring what pyproject.toml declares (an
    editable install made before the entry point existed lacks it; where the installed one has
    it, pytest loads the plugin once, under the entry point's name)."""
    import os
    import tomllib

    from tests.conftest import ROOT

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    # Named as conftest.py and "-p attnsuite.plugin" name it: pytest registers a name once.
    assert declared == {"attnsuite.plugin": "attnsuite.plugin"}
    dist = tmp_path / "site" / "attnsuite_entry_point-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: attnsuite-entry-point\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in declared.items()))
    if checkout:
        return os.pathsep.join([str(ROOT), str(tmp_path / "site")])
    # attnsuite alone, as an installed package is: no cases, no kernels.
    (tmp_path / "site" / "attnsuite").symlink_to(ROOT / "attnsuite")
    return str(tmp_path / "site")


@pytest.mark.parametrize("where", ["root", "elsewhere"])
def test_workloads_dir_outside_the_checkout_with_a_space_keeps_the_checkout_s_setup(tmp_path, where):
    """``pytest --device cpu --workloads DIR``: pytest takes DIR for a test path before the
    plugin's options are known; the checkout's rootdir and ini still hold (testpaths, -m)."""
    import os
    import shutil

    from attnsuite.records import read_records
    from tests.conftest import ROOT
    from tests.processes import run_python

    data = tmp_path / "dataset"
    shutil.copytree(ROOT / "tests" / "data" / "flashinfer_trace", data)
    cwd = ROOT if where == "root" else tmp_path / "elsewhere"
    cwd.mkdir(exist_ok=True)
    paths = [] if where == "root" else [str(ROOT / "cases" / "paged_decode.py")]
    records = tmp_path / "records"
    proc = run_python(["-m", "pytest", *paths, "--device", "cpu", "--workloads", str(data), "-m", "workload",
                       "--records-dir", str(records), "--report-html", "none"], cwd=cwd,
                      env={**os.environ, "PYTHONPATH": _entry_point_path(tmp_path)}, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "unrecognized arguments" not in output, output[-3000:]
    assert f"rootdir: {ROOT}" in output
    outcomes = {r["case_id"].split("-")[-2] + "-" + r["case_id"].split("-")[-1].rstrip("]"): r["outcome"]
                for r in read_records([records]) if r["family"] == "paged_decode"}
    assert outcomes == {"rand-1": "pass", "st-1": "pass", "missing-blob": "skip"}, outcomes


def test_options_parse_in_another_project_and_the_plugin_stays_out_of_its_way(tmp_path):
    import os

    from tests.processes import run_python

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    # The suite's cpu device would have set TRITON_INTERPRET for the whole process.
    (theirs / "test_theirs.py").write_text("import os\n\n\ndef test_theirs():\n"
                                           "    assert 'TRITON_INTERPRET' not in os.environ\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = _entry_point_path(tmp_path, checkout=False)
    plain = run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=theirs, env=env, timeout=300)
    assert plain.returncode == 0 and "1 passed" in plain.stdout and "attnsuite" not in plain.stdout, plain.stdout
    assert not (theirs / "reports").exists()
    ours = run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--device", "cpu"], cwd=theirs, env=env,
                      timeout=300)
    assert ours.returncode == 4 and "family registry package 'cases' cannot be imported" in ours.stderr, ours.stderr


def test_a_misread_option_value_is_found():
    from attnsuite.rootdir import misread

    assert misread(["--device", "cpu", "--workloads", "/", "-k", "x"], {"--workloads", "--device", "-k"}) == ["/"]
    assert misread(["--workloads=/", "/"], {"--workloads"}) == []
