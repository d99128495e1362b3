"""The shape of the code, checked.

* No import cycle among the modules of ``attnsuite`` and ``kernels`` (one graph over both).
  Every import statement counts, at module level or inside a function: a lazy import still
  ties two modules together, and a circle that only a lazy import keeps from failing is still a
  circle to a reader. ``from pkg import name`` is an edge to ``pkg.name`` where that is a module,
  else to ``pkg`` (a name its ``__init__`` defines). Python's own import of a package before its
  submodule is not an edge: a package that imports its submodules is fine, as long as none of
  them takes a name from the package back.
* The harness never reaches into a private name of ``kernels/``; the references share no code
  with the kernels they judge.
* The plugin and the README stay short (300 lines or fewer).
* Families are named in one place, the registry (``cases/__init__.py``): no other module holds a
  literal list of three or more family names, nor does tox.ini or a script.
* No text names a work item (the word issue or ticket and a number, in prose or in a file name):
  a reader of the repository has no tracker, so each mention says what the code does or why.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def _imports(path: Path, package: str) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every import statement in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    here = parts if path.name == "__init__.py" else parts[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.append((module, [a.name for a in node.names]))
    return found


def _modules(package: str) -> dict[str, Path]:
    root = ROOT / package
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _graph(*packages: str) -> dict[str, set[str]]:
    modules = {m: p for package in packages for m, p in _modules(package).items()}
    graph = {m: set() for m in modules}
    for name, path in modules.items():
        for target, names in _imports(path, ""):
            # ``from pkg import mod`` names the module; ``from pkg import name`` the package
            candidates = [f"{target}.{n}" if f"{target}.{n}" in modules else target for n in names] or [target]
            for c in candidates:
                # the longest known module the import names (``import attnsuite.compile.npu``)
                while c and c not in modules:
                    c = c.rpartition(".")[0]
                if c and c != name:
                    graph[name].add(c)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle_inside_attnsuite_and_kernels():
    cycle = _cycle(_graph("attnsuite", "kernels"))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_sees_a_cycle():
    assert _cycle({"a": {"a.b"}, "a.b": {"a.c"}, "a.c": {"a.b"}}) == ["a.b", "a.c", "a.b"]
    assert _cycle({"a": {"a.b"}, "a.b": set()}) is None
    # a package taking a name from the submodule that takes a name from it back
    assert _cycle({"a": {"a.b"}, "a.b": {"a"}}) == ["a", "a.b", "a"]


def test_the_graph_tells_a_submodule_from_a_name_of_its_package(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .low import thing\n")
    (pkg / "low.py").write_text("def f():\n    from . import mid\n")  # a lazy import counts
    (pkg / "mid.py").write_text("from . import thing\n")              # a name of the package
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    graph = _graph("pkg")
    assert graph == {"pkg": {"pkg.low"}, "pkg.low": {"pkg.mid"}, "pkg.mid": {"pkg"}}
    assert _cycle(graph) == ["pkg", "pkg.low", "pkg.mid", "pkg"]


def _private_kernel_names(package: str) -> list[str]:
    bad = []
    for name, path in _modules(package).items():
        for target, names in _imports(path, package):
            if target != "kernels" and not target.startswith("kernels."):
                continue
            private = [p for p in target.split(".")[1:] if p.startswith("_")]
            private += [n for n in names if n.startswith("_")]
            if private:
                bad.append(f"{path.relative_to(ROOT)}: {target} {private}")
    return bad


def test_the_harness_imports_no_private_name_of_the_kernels():
    assert _private_kernel_names("attnsuite") == []


def test_references_import_nothing_from_the_kernels():
    offenders = [f"{p.relative_to(ROOT)}: {t}" for name, p in _modules("references").items()
                 for t, _ in _imports(p, "references") if t == "kernels" or t.startswith("kernels.")]
    assert offenders == []


# --- sizes ---------------------------------------------------------------------------------------

#: A module or page past this many lines is doing (or telling) more than one thing.
MOST_LINES = 300


def test_the_plugin_is_thin_hooks():
    lines = len((ROOT / "attnsuite" / "plugin.py").read_text(encoding="utf-8").splitlines())
    assert lines <= MOST_LINES, f"attnsuite/plugin.py has {lines} lines: move work into modules of its own"


def test_the_readme_reads_in_one_sitting():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= MOST_LINES, f"README.md has {lines} lines: the manual belongs in docs/"


# --- the tree's files ----------------------------------------------------------------------------

def _tree_files(*suffixes: str) -> list[Path]:
    """The repository's files (tracked, or new and not ignored) ending in ``suffixes``."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.splitlines()
        paths = [ROOT / p for p in out]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file but hidden ones
        paths = [p for p in ROOT.rglob("*") if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)]
    return sorted(p for p in paths if p.name.endswith(suffixes) and p.is_file())


# --- families named in one place -----------------------------------------------------------------

def _family_names() -> set[str]:
    from attnsuite import registry

    return set(registry.names())


#: Three names in one list is a list of families; one or two is a case, a default, a comparison.
MOST_NAMES = 2


def _family_lists(path: Path, names: set[str]) -> list[str]:
    """Literal tuples, lists and sets of a Python file that hold more than ``MOST_NAMES`` family
    names; for any other file, lines that do."""
    found = []
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                held = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
                if len(held) > MOST_NAMES:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {', '.join(held)}")
    else:
        word = re.compile(r"[A-Za-z0-9_]+")
        for number, line in enumerate(text.splitlines(), 1):
            held = [w for w in word.findall(line) if w in names]
            if len(held) > MOST_NAMES:
                found.append(f"{path.relative_to(ROOT)}:{number}: {', '.join(held)}")
    return found


#: Where a list of families would be one the code iterates: the harness, the kernels, catalogs,
#: references, mutants, benchmarks, scripts and the tox environments. The project's own tests
#: state expectations about named families (which take GQA, which have a fast path) and are
#: left out; the registry is the one list there is.
_FAMILY_LIST_ROOTS = ("attnsuite", "kernels", "cases", "references", "mutants", "benchmarks", "scripts", "examples")
_REGISTRY = Path("cases", "__init__.py")


def test_no_list_of_families_outside_the_registry():
    names = _family_names()
    files = [p for p in _tree_files(".py", ".sh", ".ini")
             if p.relative_to(ROOT).parts[0] in _FAMILY_LIST_ROOTS or p.relative_to(ROOT) == Path("tox.ini")]
    offenders = [hit for p in files if p.relative_to(ROOT) != _REGISTRY for hit in _family_lists(p, names)]
    assert offenders == [], "families are listed in cases/__init__.py only:\n" + "\n".join(offenders)


def test_the_family_list_check_sees_a_list(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "a.py").write_text('X = ("decode", "prefill", "mustafar")\nY = ("decode", "prefill")\n')
    (tmp_path / "b.ini").write_text("run cases/decode.py cases/prefill.py cases/mustafar.py\n")
    names = {"decode", "prefill", "mustafar"}
    assert _family_lists(tmp_path / "a.py", names) == ["a.py:1: decode, prefill, mustafar"]
    assert _family_lists(tmp_path / "b.ini", names) == ["b.ini:1: decode, prefill, mustafar"]


# --- no work-item numbers ------------------------------------------------------------------------

WORK_ITEM = re.compile(r"\b(?:issue|ticket)s?[ _-]?#?\d+", re.IGNORECASE)


def _work_items(path: Path) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{n}: {m.group(0)}"
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
            for m in WORK_ITEM.finditer(line)]


def test_no_text_names_a_work_item():
    offenders = [hit for p in _tree_files(".py", ".sh", ".md", ".toml", ".ini") for hit in _work_items(p)]
    assert offenders == [], f"{len(offenders)} mentions of work items (say what the code does or why):\n" \
                            + "\n".join(offenders[:60])


def test_the_work_item_check_sees_one(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    word, other = "issue", "ticket"  # spelt apart: this file is in the tree it checks
    (tmp_path / "x.md").write_text(f"the targets of {word.title()} 15\nrun scripts/{word}26_gpu.sh\n"
                                   f"see {word}-3, #4; {other} #7\nan {word} with 2 kernels; t{word}12\n")
    assert [h.split(": ", 1)[1] for h in _work_items(tmp_path / "x.md")] == [
        f"{word.title()} 15", f"{word}26", f"{word}-3", f"{other} #7"]
