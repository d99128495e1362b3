"""The shape of the code, checked: no import cycle inside ``attnsuite`` (counting imports inside
functions too: a lazy import still ties two modules together), the harness never reaches into a
private name of ``kernels/``, and the references share no code with the kernels they judge."""
from __future__ import annotations

import ast
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


def _graph(package: str) -> dict[str, set[str]]:
    modules = _modules(package)
    graph = {m: set() for m in modules}
    for name, path in modules.items():
        for target, names in _imports(path, package):
            candidates = [target] + [f"{target}.{n}" for n in names]
            for c in candidates:
                # the longest known module the import names (``from .compile import npu`` -> compile.npu)
                while c and c not in modules:
                    c = c.rpartition(".")[0]
                if c and c != name and c.startswith(package):
                    graph[name].add(c)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            # a package importing its own submodules (or a submodule its package) is not a cycle
            if nxt.startswith(node + ".") or node.startswith(nxt + "."):
                continue
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


def test_no_import_cycle_inside_attnsuite():
    cycle = _cycle(_graph("attnsuite"))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_sees_a_cycle():
    assert _cycle({"a": {"a.b"}, "a.b": {"a.c"}, "a.c": {"a.b"}}) == ["a.b", "a.c", "a.b"]
    assert _cycle({"a": {"a.b"}, "a.b": set()}) is None


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
