"""Known failures as strict, version-keyed expectations.

An entry says: on these devices, with this compiler package in this version range, these
cases fail at this stage with a message matching this pattern. A matching case is marked
``xfail(strict=True)``; if it then *passes* (a fix upstream), the run fails with XPASS(strict)
so the entry gets retired. A failure with a different stage or message is a plain failure:
the ledger never hides a new bug behind an old one.
"""
from __future__ import annotations

import functools
import fnmatch
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

#: Distributions that provide the ``triton`` module; triton-ascend installs one named triton.
COMPILER_PACKAGES = ("triton-ascend", "triton")


@dataclass(frozen=True)
class KnownFailure:
    id: str
    devices: tuple[str, ...]
    package: str
    versions: str
    families: tuple[str, ...]
    stage: str
    match: str
    reason: str
    #: Case parameters the entry is limited to: name -> allowed values. A case that has no such
    #: parameter is not constrained by it.
    where: Mapping[str, tuple] = field(default_factory=dict)
    #: Case parameters that exempt a case (all of them must match): e.g. a batch with no tokens
    #: never reaches the construct. Several such sets (a TOML array of tables): any one exempts.
    unless: Mapping[str, tuple] | tuple[Mapping[str, tuple], ...] = field(default_factory=dict)
    #: Parameters a case must carry for the entry to apply: ``where`` lets a case without a
    #: parameter through, which is wrong when its absence means a default that never fails
    #: (no ``scale`` parameter: the default softmax scale, not a negative one).
    requires: tuple[str, ...] = ()
    #: Upstream tracker or issue.
    reference: str = ""
    #: The case id of the minimal probe that reproduces it.
    probe: str = ""
    #: "numeric" (a run on the device) or "compile" (--compile-only).
    mode: str = "numeric"
    #: The porting_notes.md section (heading anchor) that explains it.
    note: str = ""
    #: Implementation names it applies to (fnmatch globs): e.g. not to a vendor op that never
    #: goes through the Triton compiler the entry is about.
    impls: tuple[str, ...] = ("*",)
    #: Implementations for which the entry is strict (a pass is a stale entry): those known to
    #: hit the failure. For the others it applies to (an out-of-tree kernel that may or may not
    #: use the construct) a pass is simply a pass. Default: strict for every implementation.
    strict_impls: tuple[str, ...] = ("*",)
    #: A failure of the interpreter itself: it explains a failure only of a case in which the
    #: implementation ran some Triton kernel under the interpreter (attnsuite/interpreted.py); a
    #: torch or vendor implementation's failure on the same case is its own.
    only_after_interpreted_launch: bool = False

    def strict_for(self, impl: str | None) -> bool:
        return impl is None or any(fnmatch.fnmatchcase(impl, g) for g in self.strict_impls)

    def applies(self, case, device_kind: str, versions: Mapping[str, str], mode: str = "numeric",
                impl: str | None = None) -> bool:
        if mode != self.mode or device_kind not in self.devices or case.family not in self.families:
            return False
        if impl is not None and not any(fnmatch.fnmatchcase(impl, g) for g in self.impls):
            return False
        installed = versions.get(self.package)
        if installed is None or not _in_range(installed, self.versions):
            return False
        if any(k not in case.params for k in self.requires):
            return False
        exempt = (self.unless,) if isinstance(self.unless, Mapping) else self.unless
        if any(m and all(k in case.params and case.params[k] in values for k, values in m.items()) for m in exempt):
            return False
        return all(k not in case.params or case.params[k] in allowed for k, allowed in self.where.items())

    def explains(self, stage: str, message: str, interpreted_launches: int | None = None) -> bool:
        """Whether a failure (stage, message) is this one; ``interpreted_launches``: how many
        Triton kernels the interpreter ran in the case (None: not counted)."""
        if self.only_after_interpreted_launch and interpreted_launches == 0:
            return False
        return stage == self.stage and re.search(self.match, message) is not None

    def describe(self) -> dict[str, Any]:
        return {"id": self.id, "reason": self.reason, "versions": f"{self.package}{self.versions}",
                "reference": self.reference, "probe": self.probe, "note": self.note, "mode": self.mode}


def load(path: str | Path) -> list[KnownFailure]:
    """The ledger entries of a TOML file (see cases/known_failures.toml for the fields)."""
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    entries = []
    for raw in data.get("failure", []):
        raw = dict(raw)
        for key in ("devices", "families", "impls", "strict_impls", "requires"):
            raw[key] = tuple(raw.get(key, ("*",) if key in ("impls", "strict_impls") else ()))
        raw["where"] = {k: tuple(_frozen(x) for x in v) for k, v in raw.get("where", {}).items()}
        unless = raw.get("unless", {})
        frozen = [{k: tuple(_frozen(x) for x in v) for k, v in m.items()}
                  for m in (unless if isinstance(unless, list) else [unless])]
        raw["unless"] = frozen[0] if not isinstance(unless, list) else tuple(frozen)
        try:
            entries.append(KnownFailure(**raw))
        except TypeError as exc:
            raise ValueError(f"{path}: ledger entry {raw.get('id', '?')!r}: {exc}") from None
    ids = [e.id for e in entries]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise ValueError(f"{path}: duplicate ledger ids {sorted(dupes)}")
    return entries


def _frozen(value):
    """TOML arrays as tuples, as case parameters hold them (``lengths = [0, 0]`` -> (0, 0))."""
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


class KnownFailureHit(Exception):
    """Raised in place of a failure that a ledger entry explains; the xfail mark expects it."""

    def __init__(self, entry: KnownFailure, stage: str, message: str):
        super().__init__(f"[known failure {entry.id}] {message}")
        self.entry = entry
        self.stage = stage


def _in_range(version: str, spec: str) -> bool:
    try:
        # A local suffix ("3.6.0+git1234") still belongs to its release; a pre-release
        # ("3.2.0rc2") is its own version, matched as such.
        return Version(version.split("+")[0]) in SpecifierSet(spec, prereleases=True)
    except InvalidVersion:
        return False


@functools.lru_cache(maxsize=1)
def installed_versions() -> dict[str, str]:
    found = {}
    for dist in COMPILER_PACKAGES:
        version = distribution_version(dist)
        if version is not None:
            found[dist] = version
    return found


@functools.lru_cache(maxsize=None)
def distribution_version(dist: str) -> str | None:
    """The installed version of a distribution (None: not installed). Entries about another
    library's defect (torch's flex_attention, FlagGems) are keyed to that library's version."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


class _Installed(dict):
    """The compiler packages' versions, and any other distribution's on request."""

    def get(self, dist, default=None):
        if dist in self:
            return self[dist]
        version = distribution_version(dist)
        return default if version is None else version


def lookup(entries: Iterable[KnownFailure], case, device_kind: str,
           versions: Mapping[str, str] | None = None, mode: str = "numeric",
           impl: str | None = None) -> KnownFailure | None:
    versions = _Installed(installed_versions()) if versions is None else versions
    for entry in entries:
        if entry.applies(case, device_kind, versions, mode, impl):
            return entry
    return None
