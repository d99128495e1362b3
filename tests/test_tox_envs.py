"""The tox environments as users meet them. cpu, tests and cuda-compile run in one virtualenv
(cpu's); cuda and bench link the machine's own torch and triton (scripts/gpu_env.py), which on
the lent GPU machines live in a virtualenv tox cannot see through ``system_site_packages``.
There is no GPU here: a throwaway venv holding a stand-in ``torch`` (and ``triton``) package
plays the machine's torch env, and everything runs with ``PIP_NO_INDEX=1``, so any download
attempt fails the test."""
from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_env.py"
STAND_IN = "0.0+stand.in"
#: What the suite needs beside torch, as distributions (with what they need to import).
SUITE_DISTS = ("pytest", "pluggy", "iniconfig", "packaging", "pygments", "pytest-xdist", "execnet",
               "pytest-timeout", "jinja2", "markupsafe")


def _site_packages(prefix: Path) -> Path:
    out = subprocess.run([str(prefix / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def _link_dist(dist: str, site: Path) -> None:
    """Make an installed distribution (package and metadata) importable from ``site`` by symlink:
    the host env gets the test runner's pytest & co without an index."""
    try:
        d = md.distribution(dist)
    except md.PackageNotFoundError:
        return
    tops = {Path(str(f)).parts[0] for f in d.files or () if not str(f).startswith("..")}
    base = Path(d.locate_file(""))
    for top in tops:
        src = base / top
        if src.exists() and not (site / top).exists() and top != "__pycache__" and not top.endswith(".pth"):
            (site / top).symlink_to(src)


def stand_in_host(prefix: Path, *, dists=SUITE_DISTS, torch=True) -> Path:
    """A venv like a GPU machine's: a fake torch and triton (no import cost, an unmistakable
    version) and the suite's other needs; no pip. Returns its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(prefix)
    site = _site_packages(prefix)
    names = ("torch", "triton") if torch else ()
    for name in names:
        (site / name).mkdir()
        (site / name / "__init__.py").write_text(f'__version__ = "{STAND_IN}"\nSTAND_IN = True\n')
        meta = site / f"{name}-{STAND_IN}.dist-info"
        meta.mkdir()
        (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {STAND_IN}\n")
    for dist in dists:
        _link_dist(dist, site)
    return prefix / "bin" / "python"


def clean_env(**extra: str) -> dict:
    """The environment of a user's shell with no torch anywhere on PATH, and no index."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ATTN_", "TOX_", "VIRTUAL_ENV", "CONDA_", "PYTHON", "PIP_"))}
    path = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                           if not Path(p, "python").exists() or p in ("/usr/bin", "/bin"))
    return {**env, "PATH": path, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "", "PIP_CONFIG_FILE": os.devnull,
            **extra}


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Path:
    return stand_in_host(tmp_path_factory.mktemp("torch-venv") / "venv")


def make_env(prefix: Path) -> Path:
    """An empty virtualenv of the base interpreter, as tox makes for the cuda env, but without
    pip: any attempt to install fails, as it would offline."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    return prefix / "bin" / "python"


def run(python: Path | str, *args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), *args], capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)


# --------------------------------------------------------------------------- scripts/gpu_env.py


def test_gpu_env_links_the_machines_torch_and_downloads_nothing(host, tmp_path):
    env_python = make_env(tmp_path / "env")
    # As when tox runs on the torch venv's python: toxfile.py records it as ATTN_TOX_PYTHON.
    env = clean_env(ATTN_TOX_PYTHON=str(host))
    res = run(env_python, str(SCRIPT), env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"using torch from {host}" in res.stdout and "installing" not in res.stdout
    assert f"torch {STAND_IN}, triton {STAND_IN}" in res.stdout
    check = run(env_python, "-c", "import json, torch, triton, xdist, pytest_timeout, jinja2, packaging; "
                "print(json.dumps([torch.__file__, torch.__version__, getattr(torch, 'STAND_IN', False)]))", env=env)
    assert check.returncode == 0, check.stderr
    torch_file, version, stand_in = json.loads(check.stdout)
    assert Path(torch_file).is_relative_to(host.parent.parent) and version == STAND_IN and stand_in
    # Linked, not copied: the env's own site-packages holds the .pth and nothing of torch.
    own = _site_packages(tmp_path / "env")
    assert (own / "_attnsuite_machine_torch.pth").exists() and not (own / "torch").exists()
    # pytest inside the env finds xdist and timeout as plugins (their entry points came along).
    plugins = run(env_python, "-m", "pytest", "--version", "-p", "xdist", "-p", "pytest_timeout", env=env)
    assert plugins.returncode == 0, plugins.stderr


def test_gpu_env_offline_names_what_is_missing(tmp_path):
    host = stand_in_host(tmp_path / "host", dists=[d for d in SUITE_DISTS if d != "pytest-timeout"])
    env_python = make_env(tmp_path / "env")
    res = run(env_python, str(SCRIPT), "--torch-python", str(host), env=clean_env())
    assert res.returncode == 1
    assert "not found beside torch, installing: pytest-timeout" in res.stdout
    assert re.search(r"error: still missing pytest_timeout: install them beside torch \(.*python -m pip install "
                     r"pytest-timeout\) or run with network", res.stderr), res.stderr


def test_gpu_env_without_torch_anywhere_says_where_it_looked(tmp_path):
    nothing = stand_in_host(tmp_path / "plain", torch=False)
    env_python = make_env(tmp_path / "env")
    res = run(env_python, str(SCRIPT), env=clean_env(ATTN_TOX_PYTHON=str(nothing)))
    assert res.returncode == 1
    assert f"the Python tox runs on (ATTN_TOX_PYTHON): {nothing} has no torch" in res.stdout
    assert "installing torch and triton from the package index" in res.stdout
    assert "could not install torch (offline?)" in res.stderr


def _load_script():
    spec = importlib.util.spec_from_file_location("gpu_env", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_env_search_order_and_python_version(monkeypatch, tmp_path):
    """A torch of another Python version is passed over, with the reason; the first match of
    this version wins, in the documented order."""
    gpu_env = _load_script()
    pythons = {}
    for name in ("explicit", "tox", "venv", "conda"):
        exe = tmp_path / name / "bin" / "python3"
        exe.parent.mkdir(parents=True)
        exe.write_text("")
        pythons[name] = str(exe)
    monkeypatch.setenv("ATTN_TORCH_PYTHON", pythons["explicit"])
    monkeypatch.setenv("ATTN_TOX_PYTHON", pythons["tox"])
    monkeypatch.setenv("ATTN_HOST_VIRTUAL_ENV", str(tmp_path / "venv"))
    monkeypatch.setenv("CONDA_PREFIX", str(tmp_path / "conda"))
    order = [exe for _, exe in gpu_env.candidates(None)]
    assert order[:4] == [pythons[n] for n in ("explicit", "tox", "venv", "conda")]
    mine = list(sys.version_info[:2])
    answers = {pythons["explicit"]: {"version": [2, 7], "torch": True},
               pythons["tox"]: {"version": mine, "torch": False},
               pythons["venv"]: {"version": mine, "torch": True, "executable": pythons["venv"], "site_dirs": []}}
    monkeypatch.setattr(gpu_env, "probe", lambda exe: answers.get(exe))
    found, notes = gpu_env.find_torch(None)
    assert found["executable"] == pythons["venv"] and "ATTN_HOST_VIRTUAL_ENV" in found["origin"]
    assert notes[0].endswith(f"has torch but is Python 2.7, this environment is {mine[0]}.{mine[1]}")
    assert notes[1].endswith("has no torch")


# --------------------------------------------------------------------------- tox itself


def tox_python() -> str:
    """A Python that can run tox: the one running this tox (toxfile.py records it), or this one."""
    for candidate in (os.environ.get("ATTN_TOX_PYTHON"), sys.executable):
        if candidate and subprocess.run([candidate, "-c", "import tox"], capture_output=True).returncode == 0:
            return candidate
    if os.environ.get("TOX_ENV_NAME"):
        pytest.fail("running under tox, yet no Python here can import tox")
    pytest.skip("tox is not installed here (pip install tox): the tox.ini checks need it")


def tox_config(*envs: str, keys=("commands_pre", "commands", "deps", "package", "depends")) -> dict:
    res = subprocess.run([tox_python(), "-m", "tox", "config", "-c", str(ROOT / "tox.ini"), "-e", ",".join(envs),
                          "-k", *keys], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    config, env, key = {}, None, None
    for line in res.stdout.splitlines():
        if m := re.fullmatch(r"\[testenv:(.+)\]", line):
            env, config[m.group(1)] = m.group(1), {}
        elif m := re.fullmatch(r"(\w+) =\s?(.*)", line):
            key = m.group(1)
            config[env][key] = [m.group(2)] if m.group(2) else []
        elif line.startswith("  ") and env and key:
            config[env][key].append(line.strip())
    return config


def test_tests_and_cuda_compile_run_in_cpus_virtualenv():
    config = tox_config("cpu", "tests", "cuda-compile", "cuda", "bench",
                        keys=("commands_pre", "commands", "deps", "package", "depends", "extras"))
    assert "torch==2.13.0" in config["cpu"]["deps"]
    # The FlashInfer-Trace tests (tests run in cpu's virtualenv) read safetensors: the trace extra.
    assert {"triton", "trace"} <= set(config["cpu"]["extras"]), config["cpu"]["extras"]
    for name in ("tests", "cuda-compile"):
        env = config[name]
        assert env["deps"] == [] and env["package"] == ["skip"] and env["depends"] == ["cpu"]
        assert any(re.search(r"-m tox .*-e cpu --notest", c) for c in env["commands_pre"]), env
        cpu_python = str(Path(".tox", "cpu", "bin", "python"))
        assert env["commands"] and all(cpu_python in c for c in env["commands"]), env
    for name in ("cuda", "bench"):  # nothing for tox to download: the machine's torch is linked
        assert config[name]["deps"] == [] and config[name]["package"] == ["skip"]
        assert any("scripts/gpu_env.py" in c for c in config[name]["commands_pre"])
    assert any("pytest_benchmark=pytest-benchmark" in c for c in config["bench"]["commands_pre"])
    # Files named in commands exist (a renamed test module would select nothing: pytest exit 5).
    named = {p for env in config.values() for c in env["commands"] for p in re.findall(r"\S+\.py\b", c)}
    assert named and all((ROOT / p).is_file() for p in named), sorted(p for p in named if not (ROOT / p).is_file())


def test_tox_cuda_env_uses_the_torch_of_the_python_tox_runs_on_offline(host, tmp_path):
    """``tox -e cuda`` as on the lent GPU machines, with the suite's command swapped for one
    that says which torch the env imports. ATTN_TOX_PYTHON stands for "tox installed into the
    torch venv": toxfile.py records sys.executable only when it is not set already."""
    command = "python -c \"import torch, xdist; print('TORCH', torch.__file__, torch.__version__)\""
    env = clean_env(ATTN_TOX_PYTHON=str(host))
    tox = [tox_python(), "-m", "tox", "-c", str(ROOT / "tox.ini"), "--workdir", str(tmp_path / "work")]
    res = subprocess.run([*tox, "-e", "cuda", "-x", f"testenv:cuda.commands={command}"],
                         capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    (line,) = [l for l in res.stdout.splitlines() if l.startswith("TORCH ")]
    _, path, version = line.split()
    assert Path(path).is_relative_to(host.parent.parent) and version == STAND_IN
    assert "installing" not in res.stdout
    # The real commands of cuda and bench start (pytest stops at --version before any device
    # check): the linked pytest runs in the env, with bench's extra need installed from nowhere.
    for name in ("cuda", "bench"):
        need_bench = name == "bench"
        host_env = clean_env(ATTN_TOX_PYTHON=str(host))
        res = subprocess.run([*tox, "-e", name, "--", "--version"], capture_output=True, text=True,
                             env=host_env, timeout=300, cwd=ROOT)
        if need_bench:  # the stand-in has no pytest-benchmark, and nothing may be downloaded
            assert res.returncode != 0 and "still missing pytest_benchmark" in res.stdout + res.stderr
            continue
        assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
        assert re.search(r"pytest \d+\.\d+", res.stdout + res.stderr)
