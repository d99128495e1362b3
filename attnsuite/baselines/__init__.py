"""Vendor baselines: the device vendor's own attention operators, called on the suite's inputs.

A baseline is something to time a kernel against (and to sanity-check outputs with), never the
reference a kernel is judged by. Each caller returns ``(o, lse or None)`` in the suite's output
layout (docs/contract.md), or raises ``BaselineUnavailable`` saying why it cannot run here.
"""
from __future__ import annotations


class BaselineUnavailable(RuntimeError):
    """This baseline cannot run this case here; the message says why, in one line."""


__all__ = ["BaselineUnavailable"]
