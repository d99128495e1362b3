"""Which Triton toolchain this environment has, read from package metadata (imports nothing).

triton-ascend installs a package named ``triton`` too, so only the distribution name tells the
two apart: "ascend" (distribution ``triton-ascend``), "upstream" (``triton``), or None.
"""
from __future__ import annotations

from importlib import metadata
from typing import Optional

ASCEND_DIST = "triton-ascend"
UPSTREAM_DIST = "triton"


class ToolchainUnavailable(RuntimeError):
    """The requested target needs a toolchain this environment does not have."""


def _version(dist: str) -> Optional[str]:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def installed() -> Optional[str]:
    """"ascend", "upstream" or None."""
    if _version(ASCEND_DIST):
        return "ascend"
    if _version(UPSTREAM_DIST):
        return "upstream"
    return None


def describe() -> str:
    """e.g. "triton-ascend 3.2.0", "triton 3.9.0" or "no triton"."""
    kind = installed()
    if kind == "ascend":
        return f"{ASCEND_DIST} {_version(ASCEND_DIST)}"
    if kind == "upstream":
        return f"{UPSTREAM_DIST} {_version(UPSTREAM_DIST)}"
    return "no triton"


def require(kind: str, target: str) -> str:
    """Return the installed version of ``kind``'s distribution or raise ToolchainUnavailable."""
    have = installed()
    if have != kind:
        need = ASCEND_DIST if kind == "ascend" else UPSTREAM_DIST
        raise ToolchainUnavailable(
            f"target {target} needs the {need} toolchain; this environment has {describe()} "
            f"(upstream triton and triton-ascend cannot share an environment)")
    return _version(ASCEND_DIST if kind == "ascend" else UPSTREAM_DIST) or "?"
