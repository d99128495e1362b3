"""Which implementations a session tests, per family.

An implementation is chosen by ``--impl FAMILY=SPEC`` (repeatable: several implementations of
one family run side by side, each case once per implementation). SPEC is either a registered
name (the family's own ``impls``, e.g. ``triton`` or ``sdpa``, plus the setuptools entry points
of group ``attnsuite.impls`` named ``FAMILY.NAME``), ``package.module:callable``, or ``all``:
every registered implementation of the family (``--impl all``: of every family). Every
implementation is checked against the family's interface (attnsuite/interfaces.py) when it is
resolved, so a wrong signature stops the run before any case; one whose signature leaves out
the optional keywords (a scale-less or LSE-less kernel) is fitted to the call
(attnsuite/optional_keywords.py).

``package.module:callable`` imports from ``sys.path`` and then from the directory pytest was
started in and the rootdir (as pytest finds a rootdir conftest), so ``mypkg`` beside the
checkout's ``cases`` needs no ``PYTHONPATH``; the reproduction command of its cases names the
directory the import came from when that is neither the rootdir nor an installed package.

Under ``all`` an implementation that cannot be loaded (an entry point whose package does not
import) still runs: every case of it is ``Unsupported`` with the import error, so one broken
library never stops the others. A library adapter (``.library``, attnsuite/ecosystem) whose
library does not import is handled the same way by the runner.
"""
from __future__ import annotations

import importlib
import sys
import sysconfig
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterable

from .interfaces import BadImplementation, Unsupported, check_impl
from .optional_keywords import fit

ENTRY_POINT_GROUP = "attnsuite.impls"


#: The SPEC (and bare ``--impl`` value) that means every registered implementation.
ALL = "all"
#: The family key of a bare ``--impl all`` in ``parse_options``' result: every family.
EVERY_FAMILY = "*"


class ImplError(ValueError):
    pass


def parse_options(values: list[str]) -> dict[str, list[str]]:
    """``["decode=triton", "decode=pkg.mod:fn"]`` -> ``{"decode": ["triton", "pkg.mod:fn"]}``;
    a bare ``all`` -> ``{"*": ["all"]}`` (every family, expanded by ``resolve_all``)."""
    specs: dict[str, list[str]] = {}
    for value in values or []:
        if value == ALL:
            value = f"{EVERY_FAMILY}={ALL}"
        family, sep, spec = value.partition("=")
        if not sep or not family or not spec:
            raise ImplError(f"--impl: expected FAMILY=NAME, FAMILY=package.module:callable, FAMILY=all or all, "
                            f"got {value!r}")
        specs.setdefault(family, [])
        if spec not in specs[family]:
            specs[family].append(spec)
    return specs


#: The directories ``search_also`` was given, for the message of an import that still fails.
_ALSO: list[str] = []


def search_also(dirs: Iterable) -> None:
    """Let ``--impl`` imports find packages in ``dirs`` too (the invocation directory and the
    rootdir), after everything already on ``sys.path``."""
    for d in dirs:
        d = str(Path(d).resolve())
        if d not in _ALSO:
            _ALSO.append(d)
        if d not in sys.path:
            sys.path.append(d)


def load_callable(spec: str) -> Callable:
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ImplError(f"--impl: expected package.module:callable, got {spec!r}")
    try:
        obj = importlib.import_module(module)
    except ImportError as exc:
        head = ", ".join(sys.path[:4])
        also = f", then {', '.join(_ALSO)} (where pytest started, the rootdir)" if _ALSO else ""
        raise ImplError(f"--impl: cannot import module {module!r} of {spec!r}: {exc} (searched sys.path, "
                        f"which starts with {head}{also}; put your package's parent directory on "
                        f"PYTHONPATH or install it)") from None
    try:
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError as exc:
        raise ImplError(f"--impl: module {module!r} ({getattr(importlib.import_module(module), '__file__', '?')}) "
                        f"has no {attr!r}: {exc}") from None
    return obj


def entry_points(family: str) -> dict[str, str]:
    """Entry points of group attnsuite.impls for ``family``: name -> "module:callable"."""
    found = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        fam, _, name = ep.name.partition(".")
        if fam == family and name:
            found[name] = ep.value
    return found


def registered(family) -> dict[str, object]:
    """name -> implementation or "module:callable" (entry points load on use)."""
    return {**dict(family.impls), **entry_points(family.name)}


def resolve(family, spec: str) -> tuple[str, Callable]:
    """(name, implementation) for one --impl SPEC, checked against the family's interface."""
    if ":" in spec:
        name, fn = spec, load_callable(spec)
    else:
        known = registered(family)
        if spec not in known:
            raise ImplError(f"--impl {family.name}={spec}: no implementation of that name; registered: "
                            f"{', '.join(sorted(known))} (or give package.module:callable)")
        name, fn = spec, known[spec]
        if isinstance(fn, str):
            fn = load_callable(fn)
    try:
        check_impl(family, name, fn)
    except BadImplementation as exc:
        raise ImplError(f"--impl {family.name}={spec}: {exc}") from None
    return name, fit(family, fn)


def import_root(spec: str, rootdir) -> Path | None:
    """The ``sys.path`` directory the module of a ``module:callable`` spec was imported from,
    when running it again needs that directory named: not the rootdir (the ini's ``pythonpath``
    puts it there), not an installed package. None otherwise, or for a registered name."""
    module = spec.partition(":")[0] if ":" in spec else ""
    top = sys.modules.get(module.split(".", 1)[0]) if module else None
    where = getattr(top, "__file__", None)
    if not where:
        return None
    path = Path(where).resolve().parent
    root = path.parent if Path(where).name == "__init__.py" else path
    installed = {Path(p).resolve() for p in (sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib"))
                 if p}
    if root == Path(rootdir).resolve() or root in installed or "site-packages" in root.parts:
        return None
    return root


def resolve_all(specs: dict[str, list[str]], families: dict) -> dict[str, list[tuple[str, Callable]]]:
    """family name -> [(name, implementation)] for the --impl specs; ``families`` is the registry.
    ``all`` becomes every registered name of the family, in registration order (ours first);
    a name given twice runs once."""
    unknown = [f for f in specs if f not in families and f != EVERY_FAMILY]
    if unknown:
        raise ImplError(f"--impl: unknown family {unknown[0]!r} (registered: {', '.join(families)})")
    every = specs.get(EVERY_FAMILY, [])
    chosen = {}
    for fam, family in families.items():
        family_specs = every + specs.get(fam, []) if fam in specs or every else []
        resolved: dict[str, Callable] = {}
        for spec in family_specs:
            for name, fn in (resolve_every(family) if spec == ALL else [resolve(family, spec)]):
                resolved.setdefault(name, fn)
        if resolved:
            chosen[fam] = list(resolved.items())
    return chosen


def resolve_every(family) -> list[tuple[str, Callable]]:
    """Every registered implementation of ``family``: one that cannot be loaded or does not fit
    the interface is kept as a stand-in whose every case is Unsupported, saying why."""
    found = []
    for name in registered(family):
        try:
            found.append(resolve(family, name))
        except ImplError as exc:
            found.append((name, unusable(family, name, str(exc))))
    return found


def unusable(family, name: str, why: str):
    """A stand-in implementation for one that cannot be used here: every call is Unsupported."""
    def refuse(*args, **kwargs):
        raise Unsupported(why)

    refuse.unusable = why
    if getattr(family, "interface", None) is not None and family.interface.methods:
        # An object of methods (mustafar), which the family may also call with the op's name.
        def method(self, *args, **kwargs):
            raise Unsupported(why)

        body = {m: method for m in family.interface.methods}
        return type(f"Unusable_{name}", (), {**body, "__call__": method, "unusable": why})()
    return refuse
