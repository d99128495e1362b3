"""Helpers for the project's own tests: run the conformance suite in a subprocess and read
back what it recorded."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from attnsuite.records import read_records

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class SuiteRun:
    returncode: int
    output: str
    records: list[dict]
    report: Path

    def by_case(self) -> dict[str, dict]:
        return {r["case_id"]: r for r in self.records}

    def outcomes(self) -> dict[str, str]:
        return {r["case_id"]: r["outcome"] for r in self.records}


@pytest.fixture
def run_suite(tmp_path):
    """``run_suite(*pytest_args, env=None)`` runs pytest on the conformance cases from the
    repository root, with records and report under ``tmp_path``."""

    calls = iter(range(1000))

    def _run(*args: str, env: dict | None = None, timeout: float = 600) -> SuiteRun:
        out_dir = tmp_path / f"run{next(calls)}"
        records, report = out_dir / "records", out_dir / "index.html"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "--records-dir", str(records), "--report-html", str(report), *args]
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        proc = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)
        found = read_records([records]) if records.is_dir() else []
        return SuiteRun(proc.returncode, proc.stdout + proc.stderr, found, report)

    return _run
