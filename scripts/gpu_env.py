"""Let the running virtualenv use the machine's own torch and triton (tox's cuda and bench envs).

    python scripts/gpu_env.py [--torch-python PATH] [--need MODULE=DISTRIBUTION ...]

A GPU machine's torch is built for its driver and often lives in a virtualenv or a conda env.
A virtualenv that tox creates with ``system_site_packages`` sees the *base* interpreter's
site-packages, never a parent venv's or conda's, so this script links the right ones in: it
finds a Python of the same version that can import torch, and writes a ``.pth`` file into this
environment's site-packages that adds that Python's site directories after this env's own.
Then it checks what the suite needs (pytest, pytest-xdist, pytest-timeout, jinja2, packaging,
and triton); whatever is still missing is installed with pip, which needs an index (offline,
install it beside torch, or run with network).

Where torch is looked for, first match wins:
  1. --torch-python, or $ATTN_TORCH_PYTHON: an explicit interpreter;
  2. $ATTN_TOX_PYTHON: the interpreter tox runs on (toxfile.py records it), i.e. the Python
     you installed tox into;
  3. $ATTN_HOST_VIRTUAL_ENV (the venv active when tox started; toxfile.py records it) and
     $CONDA_PREFIX;
  4. python3 / python on PATH, this environment's own bin directory left out;
  5. the base interpreter of this environment (torch installed system-wide).
Without any torch it installs torch and triton from the index (the CUDA build PyPI serves).
Exit status 0 when the environment is complete, 1 with one line per problem otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

#: What the suite imports, as (module, distribution to install when it is missing).
NEEDED = (("pytest", "pytest"), ("xdist", "pytest-xdist"), ("pytest_timeout", "pytest-timeout"),
          ("jinja2", "jinja2"), ("packaging", "packaging"))
#: Written into this environment's site-packages; its name says who wrote it.
PTH_NAME = "_attnsuite_machine_torch.pth"
PROBE_TIMEOUT_S = 120

# Run by each candidate interpreter: its version, whether it can find torch and triton, and its
# site directories. find_spec, not import: importing torch takes seconds and may touch the GPU.
_PROBE = r"""
import json, os, site, sys
from importlib.util import find_spec
dirs = [p for p in sys.path if os.path.basename(p.rstrip("/\\")) in ("site-packages", "dist-packages")]
try:
    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
except Exception:
    user = None
print(json.dumps({"version": list(sys.version_info[:2]), "executable": sys.executable,
                  "torch": bool(find_spec("torch")), "triton": bool(find_spec("triton")),
                  "site_dirs": [d for d in dirs if os.path.isdir(d) and d != user]}))
"""


def _abs(path: str) -> str:
    # Not resolve(): a venv's python is a symlink to its base interpreter, and the venv (what
    # its pyvenv.cfg puts on sys.path) is what tells two of them apart.
    return os.path.normcase(os.path.abspath(path))


def _own_bin() -> str:
    return _abs(sysconfig.get_paths()["scripts"])


def candidates(explicit: str | None) -> list[tuple[str, str]]:
    """(where it came from, interpreter path), in the order they are tried, without repeats."""
    found: list[tuple[str, str]] = []

    def add(origin: str, path: str | None) -> None:
        if path and os.path.exists(path):
            found.append((origin, path))

    def in_env(prefix: str | None) -> str | None:
        if not prefix:
            return None
        for name in ("bin/python3", "bin/python", "python.exe", "Scripts/python.exe"):
            if os.path.exists(os.path.join(prefix, name)):
                return os.path.join(prefix, name)
        return None

    add("--torch-python / ATTN_TORCH_PYTHON", explicit or os.environ.get("ATTN_TORCH_PYTHON"))
    add("the Python tox runs on (ATTN_TOX_PYTHON)", os.environ.get("ATTN_TOX_PYTHON"))
    add("the venv active when tox started (ATTN_HOST_VIRTUAL_ENV)", in_env(os.environ.get("ATTN_HOST_VIRTUAL_ENV")))
    add("the conda env (CONDA_PREFIX)", in_env(os.environ.get("CONDA_PREFIX")))
    own = _own_bin()
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and _abs(p) != own)
    for name in ("python3", "python"):
        add(f"{name} on PATH", shutil.which(name, path=path))
    add("this environment's base interpreter", getattr(sys, "_base_executable", None))
    seen, unique = {_abs(sys.executable)}, []
    for origin, exe in found:
        if _abs(exe) not in seen:
            seen.add(_abs(exe))
            unique.append((origin, exe))
    return unique


def probe(python: str) -> dict | None:
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                             env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")})
        return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def find_torch(explicit: str | None) -> tuple[dict | None, list[str]]:
    """The first candidate of this Python version that has torch, and why the others were not."""
    mine = list(sys.version_info[:2])
    notes = []
    for origin, exe in candidates(explicit):
        info = probe(exe)
        if info is None:
            notes.append(f"{origin}: {exe} did not run")
        elif not info["torch"]:
            notes.append(f"{origin}: {exe} has no torch")
        elif info["version"] != mine:
            notes.append(f"{origin}: {exe} has torch but is Python {'.'.join(map(str, info['version']))}, "
                         f"this environment is {'.'.join(map(str, mine))}")
        else:
            return dict(info, origin=origin), notes
    return None, notes


def link(site_dirs: list[str]) -> Path:
    """Write the .pth: each line adds one site directory, with its own .pth files processed
    (editable installs, conda's extras), after this environment's packages."""
    target = Path(sysconfig.get_paths()["purelib"]) / PTH_NAME
    own = {_abs(p) for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])}
    lines = [f"import site; site.addsitedir({d!r})" for d in site_dirs if _abs(d) not in own]
    target.write_text("# written by attnsuite's scripts/gpu_env.py: the machine's torch and triton\n"
                      + "\n".join(lines) + "\n", encoding="utf-8")
    return target


def missing(needed: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Modules this environment cannot find, checked in a fresh interpreter (the .pth applies)."""
    names = [m for m, _ in needed]
    code = ("import json; from importlib.util import find_spec; "
            f"print(json.dumps([m for m in {names!r} if find_spec(m) is None]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    absent = set(json.loads(out.stdout))
    return [(m, d) for m, d in needed if m in absent]


def pip_install(dists: list[str]) -> bool:
    return subprocess.run([sys.executable, "-m", "pip", "install", *dists]).returncode == 0


def versions(modules: list[str]) -> str:
    code = ("import importlib.metadata as md, json\n"
            "out = {}\n"
            f"for d in {modules!r}:\n"
            "    try:\n        out[d] = md.version(d)\n    except md.PackageNotFoundError:\n        out[d] = '?'\n"
            "print(json.dumps(out))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    try:
        return ", ".join(f"{k} {v}" for k, v in json.loads(out.stdout).items())
    except ValueError:
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-python", help="the interpreter whose torch to use (default: search)")
    parser.add_argument("--need", action="append", default=[], metavar="MODULE=DISTRIBUTION",
                        help="one more module the env needs, and the distribution that provides it")
    args = parser.parse_args(argv)
    needed = list(NEEDED) + [tuple(n.split("=", 1)) if "=" in n else (n, n) for n in args.need]
    me = "gpu_env"

    host, notes = find_torch(args.torch_python)
    if host is not None:
        pth = link(host["site_dirs"])
        print(f"{me}: using torch from {host['executable']} ({host['origin']}); linked through {pth}")
    else:
        Path(sysconfig.get_paths()["purelib"], PTH_NAME).unlink(missing_ok=True)
        print(f"{me}: no Python {sys.version_info[0]}.{sys.version_info[1]} with torch found:")
        for note in notes:
            print(f"{me}:   {note}")
        print(f"{me}: installing torch and triton from the package index "
              f"(or set ATTN_TORCH_PYTHON=/path/to/python that has them)")
        if not pip_install(["torch", "triton"]):
            print(f"{me}: error: could not install torch (offline?). Run tox with the Python that has "
                  f"torch (python -m tox -e ...), or set ATTN_TORCH_PYTHON", file=sys.stderr)
            return 1

    absent = missing(needed + [("torch", "torch"), ("triton", "triton")])
    if absent:
        dists = [d for _, d in absent]
        print(f"{me}: not found beside torch, installing: {' '.join(dists)}")
        if not pip_install(dists) or missing(absent):
            print(f"{me}: error: still missing {', '.join(m for m, _ in missing(absent)) or ' '.join(dists)}: "
                  f"install them beside torch ({host['executable'] if host else 'the torch env'} -m pip "
                  f"install {' '.join(dists)}) or run with network", file=sys.stderr)
            return 1
    print(f"{me}: ready: {versions(['torch', 'triton'] + [d for _, d in needed])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
