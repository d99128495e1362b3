"""Side by side: ``--impl FAMILY=all`` and ``--impl all`` run every registered
implementation; records name the library behind each one; the report's side-by-side table
gives each implementation's counts and first failure; a library's failure gets a stand-alone
reproduction script that fails on its own; a library that does not import is reported once and
its cases are unsupported, never a crash.

The libraries are pretend ones, installed for the run through entry points (as a real package
registers its adapters): a correct one, one with a planted GQA bug that also declines LSE cases
(Unsupported), one whose import fails, and an entry point whose module does not exist."""
from __future__ import annotations

import os
import textwrap

import pytest

from attnsuite.impls import ImplError, parse_options, registered, resolve_all
from attnsuite.records import normalize
from attnsuite.registry import families
from attnsuite.report import render_html
from attnsuite.report.side_by_side import side_by_side
from tests.conftest import ROOT, _run_suite, made_once, suite_run_made_once
from tests.processes import run_python
from tests.test_report_bench import bench_record, conformance_record

#: The decode implementations the fake package registers through entry points.
FAKE_DECODE = {"fake", "fake_gqa", "fake_broken", "gone"}

ADAPTERS = '''
"""Adapters of a pretend library, for the side-by-side tests."""
import torch

from attnsuite.ecosystem import Library, adapter
from attnsuite.interfaces import Unsupported

FAKELIB = Library(name="FakeLib", module="fakelib", distribution="fakelib", written_against="1.2.0")
BROKEN = Library(name="BrokenLib", module="fakelib_broken", distribution="fakelib", written_against="0.9")


def _attend(q, k, v, scale, return_lse, out, lse, gqa_bug=False):
    group = q.shape[1] // k.shape[1]
    if gqa_bug:  # the planted defect: query heads paired with the wrong KV heads when grouped
        kk, vv = k.repeat(1, group, 1, 1).double(), v.repeat(1, group, 1, 1).double()
    else:
        kk, vv = k.repeat_interleave(group, 1).double(), v.repeat_interleave(group, 1).double()
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q.double() @ kk.transpose(-1, -2)) * scale
    out.copy_(torch.softmax(s, -1) @ vv)
    if return_lse:
        lse.copy_(torch.logsumexp(s, -1))
    return out, lse if return_lse else None


@adapter(FAKELIB)
def decode(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    FAKELIB.load()
    return _attend(q, k, v, scale, return_lse, out, lse)


@adapter(FAKELIB)
def decode_gqa_bug(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    FAKELIB.load()
    if return_lse:
        raise Unsupported("FakeLib's grouped decode returns no LSE")
    return _attend(q, k, v, scale, return_lse, out, lse, gqa_bug=True)


@adapter(BROKEN)
def decode_broken(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    BROKEN.load()
    raise AssertionError("never reached: the library does not import")
'''
ENTRY_POINTS = """[attnsuite.impls]
decode.fake = fakelib.adapters:decode
decode.fake_gqa = fakelib.adapters:decode_gqa_bug
decode.fake_broken = fakelib.adapters:decode_broken
decode.gone = nosuchpackage.adapters:decode
"""
IMPORT_ERROR = "libfake_cuda.so: cannot open shared object file (a missing CUDA extension)"
#: Two tiny decode cases: one grouped without LSE (the GQA bug fails it), one ungrouped with LSE
#: (the buggy adapter declines it); and one prefill case, so a bare ``all`` spans two families.
SELECT = ("-k", "decode and (S33-D128 or Hq4-Hkv4-S1-) or prefill and fp16-B2-Hq2-Hkv2-S1-D64-causal-lse")
BROKEN_CASE = "decode[fp16-B1-Hq8-Hkv2-S33-D128]"


def _write_fakelib(root) -> dict:
    (root / "fakelib").mkdir()
    (root / "fakelib" / "__init__.py").write_text("")
    (root / "fakelib" / "adapters.py").write_text(textwrap.dedent(ADAPTERS))
    (root / "fakelib_broken").mkdir()
    (root / "fakelib_broken" / "__init__.py").write_text(f"raise ImportError({IMPORT_ERROR!r})\n")
    dist = root / "fakelib-1.2.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakelib\nVersion: 1.2.3\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    return {"PYTHONPATH": f"{ROOT}:{root}"}


@pytest.fixture(scope="module")
def fakelib(request, tmp_path_factory):
    # Made once for the workers together: the shared run below names these paths in its records.
    return made_once(request, tmp_path_factory, "fakelib", _write_fakelib)[1]


@pytest.fixture(scope="module")
def every_impl_run(request, tmp_path_factory, fakelib):
    """``--impl all`` over two families, each case once per registered implementation (one run
    for the session, whichever worker runs this module's tests)."""
    return suite_run_made_once(request, tmp_path_factory, "side-by-side-all", "cases/decode.py", "cases/prefill.py",
                               *SELECT, "--impl", "all", env=fakelib)


def _by_family_impl(records):
    found = {}
    for r in records:
        found.setdefault(r["family"], {}).setdefault(r["impl"], set()).add(r["case_id"])
    return found


def test_bare_all_runs_every_registered_implementation_of_every_family(every_impl_run):
    run = every_impl_run
    found = _by_family_impl(run.records)
    assert set(found["decode"]) == set(families()["decode"].impls) | FAKE_DECODE, run.output[-3000:]
    assert set(found["prefill"]) == set(families()["prefill"].impls)
    for fam in found.values():  # every case once per implementation
        assert len({frozenset(cases) for cases in fam.values()}) == 1
    assert len(found["decode"]["triton"]) == 2 and len(found["prefill"]["triton"]) == 1
    # The run went through: the planted bug failed its case, nothing crashed.
    assert run.returncode == 1 and "Traceback" not in run.output
    assert not [r for r in run.records if r["outcome"] in ("error", "crash")]


def test_family_all_runs_only_that_family_and_mixes_with_explicit_specs(fakelib, tmp_path):
    run = _run_suite(tmp_path, "cases/decode.py", "cases/prefill.py", *SELECT, "--impl", "decode=all",
                     "--impl", "decode=fake", env=fakelib)
    found = _by_family_impl(run.records)
    assert set(found["decode"]) == set(families()["decode"].impls) | FAKE_DECODE
    assert set(found["prefill"]) == {"triton"}  # the default: no --impl for prefill
    # A name given twice (by all and by itself) runs once.
    assert sum(r["impl"] == "fake" for r in run.records) == 2


def test_expansion_order_ours_first_and_unknown_family_refused():
    specs = parse_options(["all", "decode=sdpa"])
    chosen = resolve_all(specs, families())
    assert set(chosen) == set(families())
    for name, family in families().items():
        assert [n for n, _ in chosen[name]] == list(registered(family))
        assert chosen[name][0][0] == "triton"
    with pytest.raises(ImplError, match="unknown family 'nope'"):
        resolve_all(parse_options(["nope=all"]), families())


def test_records_name_the_library_and_its_versions(every_impl_run):
    recs = [r for r in every_impl_run.records if r["family"] == "decode"]
    fake = [r for r in recs if r["impl"] == "fake"]
    assert fake and all(r["outcome"] == "pass" for r in fake)
    lib = fake[0]["library"]
    assert lib == {"name": "FakeLib", "module": "fakelib", "distribution": "fakelib", "version": "1.2.3",
                   "written_against": "1.2.0", "gpu_tested": False, "import_error": None}
    assert all(r["library"] is None for r in recs if r["impl"] == "triton")
    declined = [r for r in recs if r["impl"] == "fake_gqa" and r["params"]["lse"]]
    assert declined and all(r["outcome"] == "skip" and r["unsupported"] == "FakeLib's grouped decode returns no LSE"
                            for r in declined)


def test_old_records_without_library_fields_still_load():
    old = conformance_record("decode[x]")
    for key in ("library", "repro_script", "unsupported"):
        old.pop(key, None)
    rec = normalize(old)
    assert rec is not None and rec["library"] is None
    assert normalize({**old, "library": "garbage"})["library"] is None


def test_a_broken_library_is_reported_once_and_its_cases_are_unsupported(every_impl_run):
    run = every_impl_run
    broken = [r for r in run.records if r["impl"] == "fake_broken"]
    assert len(broken) == 2
    for r in broken:
        assert r["outcome"] == "skip" and IMPORT_ERROR in r["unsupported"]
        assert r["library"]["import_error"] == f"ImportError: {IMPORT_ERROR}"
    summary = run.output[run.output.index("attnsuite ==="):]
    # One line for the broken fake (the adapters of libraries not installed here get theirs).
    lines = [line for line in summary.splitlines() if "does not import here" in line and "BrokenLib" in line]
    assert len(lines) == 1 and "BrokenLib" in lines[0] and IMPORT_ERROR in lines[0]
    assert "decode=fake_broken (2 cases)" in lines[0]
    # An entry point whose package is missing is listed too, every case unsupported with the reason.
    gone = [r for r in run.records if r["impl"] == "gone"]
    assert len(gone) == 2 and all(r["outcome"] == "skip" and "nosuchpackage" in r["unsupported"] for r in gone)


def test_a_library_failure_gets_a_table_row_repro_command_and_script(every_impl_run, fakelib):
    run = every_impl_run
    (failed,) = [r for r in run.records if r["outcome"] == "fail"]
    assert (failed["impl"], failed["case_id"]) == ("fake_gqa", BROKEN_CASE)
    script = failed["repro_script"]
    assert script and script.endswith("decode/fp16-B1-Hq8-Hkv2-S33-D128.fake_gqa.py"), failed
    assert os.path.exists(script) and os.path.exists(script[:-3] + ".pt")
    # The table: one row per implementation, counts, the first failure with both reproductions.
    page = run.report.read_text()
    section = page[page.index('<section id="side-by-side">'):]
    section = section[:section.index("</section>")]
    for impl in ("triton", "sdpa", "fake", "fake_gqa", "fake_broken", "gone"):
        assert f">{impl}</a>" in section
    assert "FakeLib" in section and "1.2.3" in section and "does not import" in section
    assert BROKEN_CASE in section and "--impl decode=fake_gqa" in section
    assert os.path.relpath(script, run.report.parent) in section
    # Only families that ran several implementations get a table: prefill did too here.
    assert section.count("<h3 ") == 2
    # The repro command runs that one case alone, and fails the same way.
    args = failed["repro"].removeprefix("pytest ").replace("'", "").split()
    alone = _run_suite(run.report.parent / "alone", *args, env=fakelib)
    assert [(r["case_id"], r["impl"], r["outcome"]) for r in alone.records] == [(BROKEN_CASE, "fake_gqa", "fail")]
    # The script: only torch, the library and its adapter; exits 1 saying what failed.
    env = {**os.environ, **fakelib}
    proc = run_python([script], env=env, timeout=120, cwd=run.report.parent)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "o: max |out - ref|" in proc.stdout and "FAIL" in proc.stdout and "FAILED: the failure reproduces" \
        in proc.stdout
    text = open(script).read()
    assert "from fakelib.adapters import decode_gqa_bug as implementation" in text
    assert "float64" in text and "What it checks" in text and "def decode_gqa_bug" in text


def test_the_script_passes_once_the_library_is_fixed(every_impl_run, fakelib, tmp_path):
    """The script judges what the library computes (not a verdict stored with it): with the
    planted bug gone, the same script and inputs pass."""
    (failed,) = [r for r in every_impl_run.records if r["outcome"] == "fail"]
    fixed = tmp_path / "fixed"
    (fixed / "fakelib").mkdir(parents=True)
    (fixed / "fakelib" / "__init__.py").write_text("")
    source = textwrap.dedent(ADAPTERS).replace("gqa_bug=True", "gqa_bug=False")
    (fixed / "fakelib" / "adapters.py").write_text(source)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{fixed}"}
    proc = run_python([failed["repro_script"]], env=env, timeout=120, cwd=os.getcwd())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "passed: the failure did not reproduce here" in proc.stdout


# -- the report's table from records alone ----------------------------------------------------------

def _lib(name="FakeLib", error=None):
    return {"name": name, "module": "fakelib", "distribution": "fakelib", "version": "1.2.3",
            "written_against": "1.2.0", "gpu_tested": False, "import_error": error}


def test_no_table_for_a_family_with_one_implementation():
    recs = [conformance_record("decode[a]"), conformance_record("decode[b]", outcome="fail")]
    assert side_by_side(recs) == []
    assert 'id="side-by-side"' not in render_html(recs)


def test_table_counts_first_failure_and_bench_times_beside_ours():
    recs = [conformance_record("decode[a]"), conformance_record("decode[b]"),
            conformance_record("decode[a]", impl="lib", library=_lib(), outcome="pass"),
            conformance_record("decode[c]", impl="lib", library=_lib(), outcome="fail",
                               repro="pytest 'cases/decode.py::decode[c]' --impl decode=lib",
                               repro_script="/r/repro/decode/c.lib.py"),
            conformance_record("decode[b]", impl="lib", library=_lib(), outcome="fail"),
            conformance_record("decode[d]", impl="lib", library=_lib(), outcome="skip",
                               unsupported="no LSE"),
            conformance_record("decode[e]", impl="lib", library=_lib(), outcome="crash"),
            bench_record("decode[big]", kernel_ms=0.2, baselines={"sdpa_cudnn": 0.25}),
            dict(bench_record("decode[big]", kernel_ms=0.3, baselines={"sdpa_cudnn": 0.25}), impl="lib"),
            bench_record("decode[skipped]", kernel_ms=None, outcome="skip")]  # timed by nobody: no row
    (block,) = side_by_side(recs, base_dir="/r")
    ours, lib = block["rows"]
    assert ours["impl"] == "triton" and ours["counts"] == {"pass": 2, "fail": 0, "unsupported": 0}
    assert lib["counts"] == {"pass": 1, "fail": 2, "unsupported": 1}
    assert [(o["outcome"], o["count"]) for o in lib["other"]] == [("crash", 1)]
    assert lib["library"]["name"] == "FakeLib" and lib["library"]["version"] == "1.2.3"
    # The first failure (fail/error/crash/timeout/xpass) by case id that has a script, else the first.
    first = lib["first_failure"]
    assert first["case_id"] == "decode[c]" and first["repro"].endswith("--impl decode=lib")
    no_scripts = [dict(r, repro_script=None) for r in recs]
    assert side_by_side(no_scripts)[0]["rows"][1]["first_failure"]["case_id"] == "decode[b]"
    assert ours["first_failure"] is None
    bench = block["bench"]
    assert bench["impls"] == ["triton", "lib"] and [b["name"] for b in bench["baselines"]] == ["sdpa_cudnn"]
    (row,) = bench["rows"]
    assert row["impls"][1]["ratio"] == "1.5×" and row["baselines"][0]["ratio"] == "1.25×"
    page = render_html(recs)
    assert 'id="side-by-side"' in page and "not GPU-tested" in page
    # The case's own row names the library and the script too.
    assert "FakeLib 1.2.3 (adapter written against 1.2.0)" in page
    assert "python &#39;/r/repro/decode/c.lib.py&#39;" in page


def test_first_failure_links_its_script_relative_to_the_page():
    recs = [conformance_record("decode[a]"),
            conformance_record("decode[c]", impl="lib", library=_lib(), outcome="fail",
                               repro_script="/r/repro/decode/c.lib.py")]
    (block,) = side_by_side(recs, base_dir="/r")
    first = block["rows"][1]["first_failure"]
    assert first["script_href"] == "repro/decode/c.lib.py"
    assert first["script_run"] == "python '/r/repro/decode/c.lib.py'"


# -- the script writer on its own ----------------------------------------------------------------

from attnsuite.ecosystem import Library, adapter  # noqa: E402

TORCH_LIB = Library(name="torch", module="torch", distribution="torch", written_against="2.13")


@adapter(TORCH_LIB)
def _zero_decode(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    out.zero_()  # wrong on purpose
    return out, None


def _case(family, case_id):
    return next(c for c in family.cases if c.id == case_id)


def test_script_writer_saves_inputs_and_refuses_what_it_cannot_reproduce(tmp_path, monkeypatch):
    import torch

    from attnsuite import repro_script
    from attnsuite.devices import host_device

    decode = families()["decode"]
    case = _case(decode, BROKEN_CASE)
    path = repro_script.write(decode, case, "zero", _zero_decode, host_device("cpu"), {"o": {"allowed": 1e-3}},
                              "o: max abs err 0.5 > allowed 1e-3", tmp_path)
    saved = torch.load(path.with_suffix(".pt"), weights_only=True)
    q, k, v = saved["args"]
    assert q.shape == (1, 8, 1, 128) and k.shape == (1, 2, 33, 128) and saved["where"] == {"o": "out"}
    assert saved["reference"]["o"].dtype == torch.float64 and saved["allowed"] == {"o": 1e-3}
    assert torch.isnan(saved["kwargs"]["out"]).all()  # the NaN-filled buffer, as the suite passes it
    assert "from tests.test_side_by_side import _zero_decode as implementation" in path.read_text()
    monkeypatch.setattr(repro_script, "MAX_BYTES", 1024)
    with pytest.raises(ValueError, match="MiB a script saves; run the repro command"):
        repro_script.write(decode, case, "zero", _zero_decode, host_device("cpu"), {}, "", tmp_path)
    with pytest.raises(ValueError, match="several methods"):
        repro_script.write(families()["mustafar"], families()["mustafar"].cases[0], "x", _zero_decode,
                           host_device("cpu"), {}, "", tmp_path)


def test_an_unusable_implementation_stands_in_with_the_family_interface():
    from attnsuite.impls import unusable
    from attnsuite.interfaces import Unsupported, check_impl

    for name in ("decode", "mustafar"):
        family = families()[name]
        stand_in = unusable(family, "gone", "cannot import module 'nosuchpackage'")
        check_impl(family, "gone", stand_in)  # it fits the interface, so the run goes on
        calls = [lambda: stand_in("compress"), lambda: stand_in.decode(None)] if name == "mustafar" \
            else [lambda: stand_in(None, None, None, scale=None, return_lse=False, out=None, lse=None)]
        for call in calls:
            with pytest.raises(Unsupported, match="nosuchpackage"):
                call()
