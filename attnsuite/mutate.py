"""The mutation catalog's runner: run each family's conformance cases against each of its mutants
(``mutants/<family>.py``, ``MUTANTS = {name: implementation}``) and report which were killed.

    python -m attnsuite.mutate                    # every family, quick profile on cpu
    python -m attnsuite.mutate decode block_sparse --json mutants.json

A mutant is killed when a case fails (numeric mismatch, crash or timeout) with it as the
implementation; each run stops at its first failure (``-x``), which names the killing case.
Cases with a ledger entry (strict xfails) are left out: they cannot judge a mutant.
Exit status 1 when any mutant survives.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from .records import read_records

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ("prefill", "prefill_varlen", "decode", "paged_decode", "sparse_decode",
            "sparse_paged_decode", "magicpig_decode", "block_sparse", "mustafar")
KILLING = ("fail", "crash", "timeout")


@dataclass
class Verdict:
    family: str
    mutant: str
    doc: str
    killed: bool
    case: str | None
    stage: str | None
    cases_run: int


def catalog(families=FAMILIES) -> list[tuple[str, str, str]]:
    """(family, mutant name, first docstring line) for every mutant of ``families``."""
    out = []
    for family in families:
        module = importlib.import_module(f"mutants.{family}")
        for name, impl in module.MUTANTS.items():
            doc = (getattr(impl, "__doc__", None) or "").strip().splitlines()
            out.append((family, name, doc[0] if doc else ""))
    return out


def run_one(family: str, mutant: str, doc: str, device: str, profile: str, timeout: float) -> Verdict:
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant}-") as tmp:
        # Known failures (strict xfails) say nothing about a mutant: a plain-torch mutant passes
        # the interpreter's bf16 cases and would stop the run as an XPASS. Leave them out.
        cmd = [sys.executable, "-m", "pytest", f"cases/{family}.py", "-x", "-q", "-m", "not xfail",
               "-p", "no:cacheprovider", "--device", device, "--profile", profile,
               "--impl", f"{family}=mutants.{family}:{mutant}",
               "--records-dir", tmp, "--report-html", "none", "--case-timeout", str(timeout)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=30 * timeout)
        records = sorted(read_records([tmp]), key=lambda r: r.get("finished_at") or "")
    killer = next((r for r in records if r["outcome"] in KILLING), None)
    return Verdict(family, mutant, doc, killer is not None, killer and killer["case_id"],
                   killer and killer.get("stage"), len(records))


def run(families=FAMILIES, *, device="cpu", profile="quick", jobs=None, timeout=600.0) -> list[Verdict]:
    todo = catalog(families)
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        return list(pool.map(lambda t: run_one(*t, device, profile, timeout), todo))


def summary(verdicts: list[Verdict]) -> str:
    lines = [f"{'family':20} {'mutant':36} {'killed':6}  first failing case (stage)"]
    for v in verdicts:
        where = f"{v.case} ({v.stage})" if v.killed else f"SURVIVED ({v.cases_run} cases run)"
        lines.append(f"{v.family:20} {v.mutant:36} {'yes' if v.killed else 'NO':6}  {where}")
    lines.append("")
    for family in dict.fromkeys(v.family for v in verdicts):
        mine = [v for v in verdicts if v.family == family]
        killed = sum(v.killed for v in mine)
        lines.append(f"{family:20} kill rate {killed}/{len(mine)} = {100 * killed / len(mine):.0f}%")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnsuite.mutate", description=__doc__.split("\n\n")[0])
    parser.add_argument("families", nargs="*", default=list(FAMILIES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--profile", default="quick")
    parser.add_argument("--jobs", type=int, default=None, help="mutants run at once (default: CPU count)")
    parser.add_argument("--json", default=None, help="also write the verdicts here")
    args = parser.parse_args(argv)
    verdicts = run(args.families, device=args.device, profile=args.profile, jobs=args.jobs)
    print(summary(verdicts))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(v) for v in verdicts], indent=1))
    return 0 if all(v.killed for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
