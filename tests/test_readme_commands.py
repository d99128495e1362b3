"""The README and the manual (docs/) say what works: every command in their ```bash blocks is
classified here and checked as far as this machine can without a GPU, an NPU, the network or
minutes of time.

* ``pytest ...``: every option is one the suite's pytest knows (this session's own parser: the
  suite's plugin and xdist are loaded here), every path it names exists; the commands that run
  a few cases on cpu run as written (``RUN``); the others say why not (``NOT_RUN``).
* ``python -m MODULE ...``: the module runs (as written where that is cheap, else with --help).
* ``tox -e ENV``: ENV is one of tox.ini's environments (building one takes minutes: not run).
* anything else must be classified in ``OTHER`` with the reason it is not run.

Also: every relative link in those pages leads to a file (and, into a markdown page, to a
heading there), every repository path they name in backticks exists, and the README stays short.
"""
from __future__ import annotations

import configparser
import os
import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.processes import run_python

README = ROOT / "README.md"
#: The pages whose commands and links are checked; the hardware log records what ran, with the
#: trees and commands of its day, and is not an instruction.
PAGES = [README] + sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "hardware-log.md")
README_MAX_LINES = 300

#: pytest commands run here as written (a case or two on cpu, seconds).
RUN = {"pytest 'cases/prefill.py::prefill[fp16-B2-Hq8-Hkv1-S17-D64-causal-lse]'"}
#: Modules run as written (cheap); every other ``python -m`` module runs with --help.
RUN_MODULES = {"attnsuite.interfaces"}
#: Options of plugins that only the environment that uses them installs.
FOREIGN_OPTIONS = {"--benchmark-": "pytest-benchmark's (tox -e bench installs it)"}
#: Commands that are not pytest, python -m or tox, and why they are not run.
OTHER = {
    "source": "activates a virtualenv in the reader's shell",
}
#: Pages another branch of the work adds (linked before they land); remove once present.
PENDING_PAGES = {"docs/plugging-in.md"}
#: Paths in backticks that are made by a run, not kept in the repository.
GENERATED = ("reports/", ".tox/", ".benchmarks/", "~/", "$TMPDIR")
#: Top-level directories whose paths, named in backticks, must exist.
TREE = ("attnsuite/", "kernels/", "cases/", "references/", "mutants/", "benchmarks/", "tests/",
        "scripts/", "docs/", ".ci/")


# --------------------------------------------------------------------------- reading the pages


def bash_commands(page: Path) -> list[tuple[int, str, list[str]]]:
    """(line, text, argv) of every command in the page's ```bash blocks: continuation lines
    joined, comments dropped, ``a && b`` split into two commands."""
    out = []
    lines = page.read_text(encoding="utf-8").splitlines()
    fence = None
    pending, pending_line = "", 0
    for i, line in enumerate(lines, 1):
        if line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
            continue
        if fence not in ("bash", "sh", "shell"):
            continue
        if not pending:
            pending_line = i
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        text, pending = pending + line, ""
        for part in text.split("&&"):
            argv = shlex.split(part, comments=True)
            if argv:
                out.append((pending_line, " ".join(shlex.quote(a) for a in argv), argv))
    return out


def all_commands() -> list[tuple[str, str, list[str]]]:
    return [(f"{p.relative_to(ROOT)}:{line}", text, argv) for p in PAGES for line, text, argv in bash_commands(p)]


def _strip_env(argv: list[str]) -> list[str]:
    while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", argv[0]):
        argv = argv[1:]
    return argv


def kind(argv: list[str]) -> tuple[str, list[str]]:
    """('pytest' | 'module' | 'pip' | 'tox' | 'other', the arguments after the program)."""
    argv = _strip_env(argv)
    if argv[0] in ("python", "python3") and len(argv) > 2 and argv[1] == "-m":
        argv = [argv[2], *argv[3:]] if argv[2] in ("pytest", "tox", "pip") else ["-m", *argv[2:]]
    if argv[0] == "-m":
        return "module", argv[1:]
    if argv[0] in ("pytest", "tox", "pip"):
        return argv[0], argv[1:]
    return "other", argv


COMMANDS = all_commands()


def _ids(items):
    return [f"{where} {text}"[:120] for where, text, _ in items]


def _of_kind(name):
    return [c for c in COMMANDS if kind(c[2])[0] == name]


# --------------------------------------------------------------------------- pytest commands


def _pytest_options(config) -> dict[str, bool]:
    """Every option this pytest knows -> whether it takes a value."""
    parser = config._parser
    known = {}
    for group in [*parser._groups, parser._anonymous]:
        for arg in group.options:
            attrs = arg.attrs()
            flag = attrs.get("action") in ("store_true", "store_false", "store_const", "count") \
                or attrs.get("nargs") == 0
            for name in arg.names():
                known[name] = not flag
    return known


def _pytest_split(args: list[str], known: dict[str, bool]) -> tuple[list[str], list[str], list[str]]:
    """(options named, unknown options, positional arguments)."""
    named, unknown, positional = [], [], []
    it = iter(args)
    for a in it:
        if not a.startswith("-"):
            positional.append(a)
            continue
        name = a.split("=", 1)[0]
        if any(name.startswith(p) for p in FOREIGN_OPTIONS):
            named.append(name)
            continue
        if name not in known:
            unknown.append(name)
            continue
        named.append(name)
        if known[name] and "=" not in a:
            next(it, None)
    return named, unknown, positional


@pytest.mark.parametrize("where,text,argv", _of_kind("pytest"), ids=_ids(_of_kind("pytest")))
def test_pytest_commands_name_known_options_and_existing_paths(pytestconfig, where, text, argv):
    known = _pytest_options(pytestconfig)
    _, unknown, positional = _pytest_split(kind(argv)[1], known)
    assert not unknown, f"{where}: `{text}` names options pytest does not know here: {unknown}"
    for p in positional:
        path = p.split("::", 1)[0]
        assert (ROOT / path).exists(), f"{where}: `{text}` names {path}, which does not exist"


def _not_run_reason(args: list[str], known: dict[str, bool]) -> str | None:
    named, _, positional = _pytest_split(args, known)
    device = next((args[i + 1] for i, a in enumerate(args[:-1]) if a == "--device"),
                  next((a.split("=", 1)[1] for a in args if a.startswith("--device=")), "cpu"))
    if "--compile-only" in named:
        return ("compile-only for npu needs triton-ascend (tox -e npu-compile)" if device == "npu"
                else "compiles every case for two archs (minutes; tox -e cuda-compile runs it)")
    if device == "cuda":
        return "needs a CUDA GPU"
    if device == "npu":
        return "needs an Ascend NPU"
    if any(o.startswith("--impl") for o in named) and "mypkg" in " ".join(args):
        return "an example: mypkg is the reader's own package"
    if not positional or positional == ["benchmarks"]:
        return ("runs the quick profile (minutes); tests/conftest.py's quick_cpu_run runs it with -n 2"
                if not positional else "benchmarks skip on cpu")
    return None


def test_every_cpu_pytest_command_is_run_or_says_why_not(pytestconfig):
    known = _pytest_options(pytestconfig)
    unclassified = [f"{where}: {text}" for where, text, argv in _of_kind("pytest")
                    if text not in RUN and _not_run_reason(kind(argv)[1], known) is None]
    assert not unclassified, ("run these here (add them to RUN: a few cases on cpu) or say in "
                              f"_not_run_reason why not: {unclassified}")
    stale = RUN - {text for _, text, _ in COMMANDS}
    assert not stale, f"RUN names commands no page has: {stale}"


@pytest.mark.parametrize("text", sorted(RUN))
def test_the_cheap_commands_run_as_written(tmp_path, text):
    argv = shlex.split(text)
    assert argv[0] == "pytest"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = run_python(["-m", "pytest", *argv[1:], "-p", "no:cacheprovider", "-q",
                       f"--records-dir={tmp_path / 'records'}", f"--report-html={tmp_path / 'index.html'}"],
                      cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, f"`{text}` exited {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    assert re.search(r"\b[1-9]\d* passed", proc.stdout), proc.stdout[-2000:]
    assert (tmp_path / "index.html").is_file()


# --------------------------------------------------------------------------- python -m, tox, others


def _modules() -> dict[str, str]:
    found = {}
    for where, text, argv in _of_kind("module"):
        found.setdefault(kind(argv)[1][0], f"{where}: {text}")
    return found


@pytest.mark.parametrize("module", sorted(_modules()))
def test_python_modules_run(module):
    argv = ["-m", module] if module in RUN_MODULES else ["-m", module, "--help"]
    proc = run_python(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert proc.returncode == 0, (f"{_modules()[module]}: `python {' '.join(argv)}` exited {proc.returncode}:\n"
                                  f"{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    assert proc.stdout.strip()


def _tox_envs() -> set[str]:
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tox.ini")
    envs = {s.split(":", 1)[1] for s in ini.sections() if s.startswith("testenv:")}
    return envs


@pytest.mark.parametrize("where,text,argv", _of_kind("tox"), ids=_ids(_of_kind("tox")))
def test_tox_commands_name_existing_environments(where, text, argv):
    args = kind(argv)[1]
    named = [e for i, a in enumerate(args[:-1]) if a == "-e" for e in args[i + 1].split(",")]
    assert named, f"{where}: `{text}` names no environment"
    missing = set(named) - _tox_envs()
    assert not missing, f"{where}: `{text}`: tox.ini has no environment {sorted(missing)}"


def test_every_other_command_is_classified():
    for where, text, argv in COMMANDS:
        what, args = kind(argv)
        if what == "pip":
            assert args[0] == "install", f"{where}: `{text}`"  # network: never run here
        elif what == "other":
            assert args[0] in OTHER, f"{where}: `{text}`: classify it in OTHER with the reason it is not run"


def test_the_parser_reads_continuations_comments_and_chains(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("x\n```bash\npytest -k decode \\\n    --device cuda   # a comment\n"
                    "python3 -m pip install tox && tox -e cpu\n```\n```text\nnot a command\n```\n")
    found = [argv for _, _, argv in bash_commands(page)]
    assert found == [["pytest", "-k", "decode", "--device", "cuda"],
                     ["python3", "-m", "pip", "install", "tox"], ["tox", "-e", "cpu"]]
    assert [kind(a)[0] for a in found] == ["pytest", "pip", "tox"]


# --------------------------------------------------------------------------- links and paths


def _anchor(heading: str) -> str:
    """GitHub's anchor for a markdown heading."""
    text = re.sub(r"[`*_]|\[|\]\([^)]*\)", lambda m: "_" if m.group(0) == "_" else "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    inside, found = False, set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside = not inside
        elif not inside and line.startswith("#"):
            found.add(_anchor(line.lstrip("#")))
    return found


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [m for m in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", m)]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_links_lead_somewhere(page):
    for link in _links(page):
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        if not path.exists() and rel in PENDING_PAGES:
            continue
        assert path.exists(), f"{page.relative_to(ROOT)}: link {link} leads to no file"
        if anchor and path.suffix == ".md":
            assert anchor in _anchors(path), f"{page.relative_to(ROOT)}: {link}: no such heading in {rel}"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_paths_named_exist(page):
    text = page.read_text(encoding="utf-8")
    named = set(re.findall(r"`([^`\s]+)`", text))
    missing = []
    for token in named:
        path = token.split("::", 1)[0].rstrip(".,:;")
        if not path.startswith(TREE) or any(c in path for c in "<>*{}$") or path.startswith(GENERATED):
            continue
        if path in PENDING_PAGES:
            continue
        if not (ROOT / path).exists():
            missing.append(path)
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {sorted(missing)}"


def test_the_readme_is_short_and_starts_with_the_two_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"
    first = [text for _, text, _ in bash_commands(README)][:4]
    assert first == ["python3 -m pip install tox", "tox -e cpu", "python3 -m pip install tox", "tox -e tests"]


def test_the_readme_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"run_tox -e tests\b", ci)
    # the tests that tox -e tests leaves out (marked profile_run) run in CI too
    assert re.search(r"run_tox -e profile-runs\b", ci)
