"""The families the harness runs, discovered from a registry module (``cases`` by default:
its ``FAMILIES`` names the catalog modules ``cases/<name>.py``, each defining ``FAMILY``).
The harness never names a family itself: everything it knows of one comes from here."""
from __future__ import annotations

import functools
import importlib
import importlib.util
from pathlib import Path

DEFAULT_PACKAGE = "cases"


class UnknownFamily(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


@functools.lru_cache(maxsize=None)
def families(package: str = DEFAULT_PACKAGE) -> dict:
    """name -> Family, in registry order."""
    registry = importlib.import_module(package)
    found = {}
    for name in registry.FAMILIES:
        module = importlib.import_module(f"{package}.{name}")
        family = getattr(module, "FAMILY", None)
        if family is None or family.name != name:
            raise TypeError(f"{package}.{name} must define FAMILY with name {name!r}")
        found[name] = family
    return found


def names(package: str = DEFAULT_PACKAGE) -> tuple[str, ...]:
    return tuple(importlib.import_module(package).FAMILIES)


def family(name: str, package: str = DEFAULT_PACKAGE):
    found = families(package)
    if name not in found:
        raise UnknownFamily(f"unknown family {name!r}; registered in {package}: {', '.join(found)}")
    return found[name]


@functools.lru_cache(maxsize=None)
def package_dir(package: str = DEFAULT_PACKAGE) -> Path | None:
    """The registry package's directory, found without importing it (or its kernels)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def module_path(name: str, package: str = DEFAULT_PACKAGE) -> Path:
    """The catalog module of a family: the file its cases are collected from."""
    return Path(importlib.import_module(f"{package}.{name}").__file__).resolve()


def family_at(path, package: str = DEFAULT_PACKAGE):
    """The family whose catalog module is ``path`` (None for any other file)."""
    target = Path(path).resolve()
    for name in names(package):
        if module_path(name, package) == target:
            return family(name, package)
    return None
