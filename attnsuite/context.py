"""Where the session lives in pytest's config, and the clock records use: the small shared piece
that lets collection, recording and the plugin reach the session without importing each other."""
from __future__ import annotations

import datetime as _dt

import pytest

SUITE = pytest.StashKey["SuiteSession"]()
#: The run as a whole (attnsuite/accounting.py), in the process that sees every case.
ACCOUNT = pytest.StashKey["RunAccount"]()


def suite(config) -> "SuiteSession":  # noqa: F821 - attnsuite.session.SuiteSession
    return config.stash[SUITE]


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
