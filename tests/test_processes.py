"""tests/processes.py: a process forked from the preloaded forkserver looks, from inside and from
outside, like the fresh interpreter ``subprocess.run`` would have started."""
import json
import os
import signal
import subprocess
import sys

import pytest

from tests.processes import forking, run_python

SHOW = ("import json, os, sys\n"
        "print(json.dumps({'argv': sys.argv, 'cwd': os.getcwd(), 'mark': os.environ.get('ATTN_TEST_MARK'),\n"
        "                  'path': sys.path[:2], 'torch': 'torch' in sys.modules}))\n"
        "print('to stderr', file=sys.stderr)\n"
        "sys.exit(int(sys.argv[1]))\n")

pytestmark = pytest.mark.skipif(not forking(), reason="no forkserver here (or ATTN_TEST_FRESH_PROCESSES=1)")


def _both(argv, tmp_path, **env):
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "extra"), **env}
    fresh = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    forked = run_python(argv, cwd=tmp_path, env=env, timeout=60)
    return fresh, forked


def test_a_forked_process_sees_what_a_fresh_one_sees_and_exits_the_same(tmp_path):
    fresh, forked = _both(["-c", SHOW, "3", "x"], tmp_path, ATTN_TEST_MARK="m")
    assert (forked.returncode, forked.stderr) == (fresh.returncode, fresh.stderr) == (3, "to stderr\n")
    seen, expected = json.loads(forked.stdout), json.loads(fresh.stdout)
    assert expected["torch"] is False and seen.pop("torch") is True  # the one difference: preloaded
    expected.pop("torch")
    # A fresh `python -c` puts '' first (the working directory); the fork puts the directory itself.
    assert seen["path"][0] == str(tmp_path) and seen["path"][1:] == expected["path"][1:] == [str(tmp_path / "extra")]
    assert {**seen, "path": None} == {**expected, "path": None}
    assert seen["argv"] == ["-c", "3", "x"] and seen["cwd"] == str(tmp_path) and seen["mark"] == "m"


def test_a_script_runs_as_main_with_its_directory_first_on_the_path(tmp_path):
    script = tmp_path / "bin" / "show.py"
    script.parent.mkdir()
    script.write_text(SHOW)
    fresh, forked = _both([str(script), "0"], tmp_path)
    assert forked.returncode == fresh.returncode == 0
    seen, expected = json.loads(forked.stdout), json.loads(fresh.stdout)
    assert seen["path"] == expected["path"] == [str(script.parent), str(tmp_path / "extra")]
    assert seen["argv"] == expected["argv"] == [str(script), "0"]


def test_a_death_by_signal_and_a_hang_end_as_they_would_for_subprocess(tmp_path):
    died = run_python(["-c", "import os; os.abort()"], cwd=tmp_path, env=dict(os.environ), timeout=60)
    assert died.returncode == -signal.SIGABRT
    with pytest.raises(subprocess.TimeoutExpired):
        run_python(["-c", "import time; time.sleep(60)"], cwd=tmp_path, env=dict(os.environ), timeout=1)


def test_torch_takes_its_thread_count_from_the_environment_it_is_given(tmp_path):
    code = "import torch; print(torch.get_num_threads())"
    for threads in ("1", "3"):
        out = run_python(["-c", code], cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": threads}, timeout=60)
        assert out.stdout.split() == [threads], out.stderr[-2000:]
