"""Python processes for the project's tests, forked from one that has imported torch and pytest.

About 80 of these tests start a Python process (a suite run, a script under ``TRITON_INTERPRET``)
and most of them check one fact in a second of work. A fresh interpreter spends longer than that
importing torch (1.3 s of CPU on a CI core, 2.0 s with pytest, numpy and jinja2), and on a 2-core
machine those imports were a third of ``tox -e tests``. So each test worker keeps a
multiprocessing forkserver that imported them once; every process a test asks for is forked
from it and then set up the way ``subprocess.run`` would set up a fresh one: its own environment,
working directory, ``sys.path`` (the ``PYTHONPATH`` it is given), ``sys.argv``, standard output
and error, exit status (a signal's negative number included) and exit handlers.

Nothing the tests exercise is imported ahead but upstream triton (it reads ``TRITON_INTERPRET`` as
a kernel is defined, not as it loads): not attnsuite, kernels or cases (they read the environment as they load),
not xdist (pytest rewrites the asserts of plugins it loads, so they must load in the run). A
suite run's xdist workers are still fresh interpreters, as they are for a user.

``ATTN_TEST_FRESH_PROCESSES=1`` starts every process with ``subprocess.run`` instead.
"""
from __future__ import annotations

import atexit
import gc
import multiprocessing
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: What the forkserver imports once (the rest of what torch pulls in comes with it).
PRELOAD = ("torch", "numpy", "pytest", "jinja2")
#: Upstream Triton too (0.2 s of CPU a process): it reads its settings, TRITON_INTERPRET among
#: them, from the environment when asked (triton/knobs.py), not as it loads, so a kernel the child
#: defines is interpreted or compiled as the child's environment says. Not triton-ascend (the npu
#: compile tiers), which installs a package of the same name under another distribution.
UPSTREAM_TRITON = ("triton", "triton.language")


def _preload() -> list[str]:
    from importlib import metadata

    try:
        metadata.distribution("triton")
    except metadata.PackageNotFoundError:
        return list(PRELOAD)
    return [*PRELOAD, *UPSTREAM_TRITON]


_context = None
_base_path: list[str] | None = None


def _forkserver():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(_preload())
    return _context


def forking() -> bool:
    return (os.environ.get("ATTN_TEST_FRESH_PROCESSES", "") in ("", "0")
            and "forkserver" in multiprocessing.get_all_start_methods())


def run_python(argv: list[str], *, cwd, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True,
    text=True, timeout=timeout)``, for ``argv`` of ``-m pytest ...``, ``-c CODE ...`` or
    ``SCRIPT ...``."""
    cmd = [sys.executable, *argv]
    if not forking():
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    with tempfile.TemporaryDirectory(prefix="attn-test-proc-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        proc = _forkserver().Process(target=_main, args=(list(argv), str(cwd), dict(env), _installation_path(),
                                                         str(out), str(err)))
        proc.start()
        proc.join(timeout)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
            raise subprocess.TimeoutExpired(cmd, timeout, output=_read(out), stderr=_read(err))
        return subprocess.CompletedProcess(cmd, proc.exitcode, _read(out), _read(err))


def _installation_path() -> list[str]:
    """A fresh interpreter's ``sys.path`` after its first entry, without PYTHONPATH: the
    standard library, site-packages and what their .pth files add (one bare interpreter, once)."""
    global _base_path
    if _base_path is None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
        shown = subprocess.run([sys.executable, "-c", "import sys; print('\\n'.join(sys.path[1:]))"], env=env,
                               capture_output=True, text=True, timeout=60, check=True).stdout
        _base_path = shown.splitlines()
    return _base_path


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _main(argv: list[str], cwd: str, env: dict, base_path: list[str], out: str, err: str) -> None:
    """In the forked process: become ``python *argv`` and run it."""
    # What the forkserver preloaded lives as long as the process: keep it out of the garbage
    # collector's passes (pytest's two full collections at the end of a run walked torch's heap:
    # 0.3-0.5 s of a one-case run's 2 s).
    gc.freeze()
    threads = os.environ.get("OMP_NUM_THREADS")
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    # What a fresh interpreter would have first on its path: the working directory for -m and -c,
    # the script's directory for a script; then PYTHONPATH.
    first = os.path.dirname(os.path.abspath(argv[0])) if argv[0] not in ("-m", "-c") else os.getcwd()
    extra = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [first, *extra, *base_path]
    # Where bytecode is read and written, as a fresh interpreter takes it from its environment
    # (the forkserver was started with its parent's flags: -B where that one had it).
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    sys.pycache_prefix = env.get("PYTHONPYCACHEPREFIX") or None
    # torch sized its thread pool from the forkserver's environment as it loaded.
    if env.get("OMP_NUM_THREADS", threads) != threads and env["OMP_NUM_THREADS"].isdigit():
        import torch

        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    atexit._clear()  # the forkserver's handlers ran in no process of ours
    try:
        code = _run(argv)
    except SystemExit as exc:
        code = exc.code
    finally:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(code)


def _run(argv: list[str]):
    import runpy

    if argv[0] == "-m" and argv[1] == "pytest":
        import pytest

        sys.argv = ["pytest", *argv[2:]]
        return int(pytest.main(argv[2:]))
    if argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        return 0
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    sys.argv = list(argv)
    runpy.run_path(argv[0], run_name="__main__")
    return 0
