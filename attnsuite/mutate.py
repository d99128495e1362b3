"""Measure the suite against a catalog of implementations: mutants (each with one realistic bug,
which some conformance case must fail) and controls (correct implementations written apart from
the project's kernels, which must pass every case they support).

    python -m attnsuite.mutate                          # every family's mutants/<family>.py
    python -m attnsuite.mutate decode block_sparse --json verdicts.json
    python -m attnsuite.mutate --catalog mypkg.bugs      # any module with MUTANTS and CONTROLS

A catalog module defines ``MUTANTS = {name: implementation}`` and ``CONTROLS = {name:
implementation}`` and names its family with ``FAMILY = "decode"`` (or ``--family``).

A mutant is killed by its first failing case (numeric mismatch, contract violation, an error, a
crash or a hang); it survives when every case passes. A control runs every case: each must pass
or be declared unsupported (``attnsuite.interfaces.Unsupported``); a failure the known-failure
ledger explains for that case (a fault of the device, such as the interpreter's bf16 dot) is
reported apart and does not count. Cases with a ledger entry are left out for mutants: they
cannot judge one; except entries about the interpreter (``only_after_interpreted_launch``), which
explain a failure only where a Triton kernel ran: a torch mutant is judged on those cases too.

Each (catalog, family) runs in a worker process that imports its kernels once, draws each
case's inputs and references once for all the implementations, and calls the runner in process
(``attnsuite.runner.run_case``). ``--jobs`` workers run in parallel, each given catalog after
catalog; the parent watches each one: a worker silent for longer than ``--case-timeout`` (a hung
case) or one that dies (a crash) is replaced, the implementation it was running counted as killed
(a mutant) or failed (a control), and the rest of its catalog goes on in the new worker. Exit status 1 when a mutant survives, a
control fails, or a catalog cannot be run.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Seconds a new worker may take to import the kernels and report ready.
STARTUP_TIMEOUT = 300.0
FAMILIES = ("prefill", "prefill_varlen", "decode", "paged_decode", "sparse_decode",
            "sparse_paged_decode", "magicpig_decode", "block_sparse", "mustafar", "dsa_sparse_attention",
            "dsa_topk_indexer")


@dataclass
class Verdict:
    family: str
    kind: str                      # "mutant" or "control"
    name: str
    doc: str
    catalog: str
    #: mutants: killed by a case; controls: passed every case they support.
    ok: bool
    case: str | None = None        # the killing case (mutant) or the first failing one (control)
    stage: str | None = None
    message: str = ""
    cases_run: int = 0
    unsupported: int = 0
    #: controls: every failing case as (case id, stage, message); known: failures the ledger explains.
    failures: list = field(default_factory=list)
    known: list = field(default_factory=list)
    #: CPU seconds the worker spent on this implementation (inputs and references it was the
    #: first to need included).
    cpu_s: float = 0.0

    @property
    def killed(self) -> bool:
        return self.kind == "mutant" and self.ok


# --- the catalog ----------------------------------------------------------------------------------

def load_catalog(module_name: str):
    module = importlib.import_module(module_name)
    if not hasattr(module, "MUTANTS") and not hasattr(module, "CONTROLS"):
        raise ValueError(f"{module_name}: a catalog defines MUTANTS and/or CONTROLS ({{name: implementation}})")
    return module


def catalog_family(module, override: str | None = None) -> str:
    """The family a catalog module is for: ``--family``, else its FAMILY (a name or a Family),
    else the module's last name (``mutants.decode``)."""
    if override:
        return override
    fam = getattr(module, "FAMILY", None)
    if fam is not None:
        return fam if isinstance(fam, str) else fam.name
    return module.__name__.rpartition(".")[2]


def first_doc_line(impl) -> str:
    doc = (getattr(impl, "__doc__", None) or "").strip().splitlines()
    return doc[0] if doc else ""


def catalog(families=FAMILIES) -> list[tuple[str, str, str]]:
    """(family, mutant name, first docstring line) for every mutant of ``families``' own catalogs."""
    out = []
    for family in families:
        module = load_catalog(f"mutants.{family}")
        out += [(family, name, first_doc_line(impl)) for name, impl in module.MUTANTS.items()]
    return out


# --- the worker: one catalog of one family, in process ----------------------------------------

class CachedFamily:
    """A family whose inputs and references are computed once per case and shared by every
    implementation the worker runs (each gets fresh copies of the inputs, views kept). The
    quality figures are left out: they judge nothing."""

    def __init__(self, family):
        self._family = family
        self._inputs: dict = {}
        self._refs: dict = {}

    def __getattr__(self, name):
        return getattr(self._family, name)

    def make_inputs(self, case, gen):
        if case.id not in self._inputs:
            self._inputs[case.id] = self._family.make_inputs(case, gen)
        return {k: _copy_keeping_view(t) for k, t in self._inputs[case.id].items()}

    def reference(self, case, inputs, compute_dtype):
        # A family's call may leave what the reference needs from the implementation (mustafar's
        # tie choices) in the inputs: those references are the implementation's own.
        if set(inputs) != set(self._inputs.get(case.id, ())):
            return self._family.reference(case, inputs, compute_dtype)
        key = (case.id, compute_dtype)
        if key not in self._refs:
            self._refs[key] = self._family.reference(case, inputs, compute_dtype)
        return self._refs[key]

    def quality(self, case, inputs, produced):
        return None


def _copy_keeping_view(t):
    import torch

    if not isinstance(t, torch.Tensor):
        return t
    storage = t.untyped_storage()
    flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(
        storage, 0, (storage.nbytes() // t.element_size(),))
    return flat.clone().as_strided(t.shape, t.stride(), t.storage_offset())


_EVENTS = sys.stdout


def _emit(**event) -> None:
    _EVENTS.write(json.dumps(event) + "\n")
    _EVENTS.flush()


def _events_apart() -> None:
    """Events keep the worker's stdout to themselves: whatever an implementation prints goes to
    stderr instead."""
    global _EVENTS
    _EVENTS = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)


def worker(device_kind: str, profile: str, fuzz_seed: int, fuzz_count: int) -> int:
    """Run the jobs read from stdin (one JSON object a line: catalog, family, shard, skip), one
    after another, reporting events on stdout as JSON lines; end at the end of stdin."""
    from .devices import device_class

    _events_apart()
    device_class(device_kind).prepare_environment()
    for line in sys.stdin:
        job = json.loads(line)
        _run_catalog(job["catalog"], job["family"], device_kind, profile, fuzz_seed, fuzz_count,
                     set(job["skip"]), tuple(job["shard"]))
    return 0


def _run_catalog(catalog_name: str, family_name: str | None, device_kind: str, profile: str, fuzz_seed: int,
                 fuzz_count: int, skip: set[str], shard: tuple[int, int]) -> None:
    """One job: a catalog's implementations (its shard of them, less ``skip``)."""
    from . import registry
    from .case import select
    from .interfaces import BadImplementation, check_impl
    from .devices import open_device
    from .ledger import load, lookup
    from .options import DEFAULT_LEDGER
    from .runner import run_case

    module = load_catalog(catalog_name)
    family_name = catalog_family(module, family_name)
    declared = getattr(module, "FAMILY", None)
    if declared is not None and not isinstance(declared, str) and declared.name == family_name:
        family = declared  # a catalog of a family outside this project's registry
    else:
        try:  # only this family's catalog module (and kernels), not the whole registry
            family = importlib.import_module(f"{registry.DEFAULT_PACKAGE}.{family_name}").FAMILY
        except (ImportError, AttributeError):
            family = registry.family(family_name)
    if profile == "fuzz":
        from .fuzz import fuzz_cases

        cases = fuzz_cases(family, fuzz_seed, fuzz_count)
    else:
        cases = select(family.cases, profile)
    cases = [c for c in cases if not family.skip_reason(c)]
    ledger = load(ROOT / DEFAULT_LEDGER)
    device = open_device(device_kind, None)
    torch_threads(device_kind)
    shared = CachedFamily(family)
    # Small cases first: a mutant that wraps an interpreted kernel meets its killing case after
    # as little interpretation as possible (the verdicts do not depend on the order).
    cases.sort(key=lambda c: sum(t.numel() for t in shared.make_inputs(c, c.generator()).values()
                                 if hasattr(t, "numel")))
    todo = [("mutant", n, f) for n, f in getattr(module, "MUTANTS", {}).items()]
    todo += [("control", n, f) for n, f in getattr(module, "CONTROLS", {}).items()]
    index, count = shard
    _emit(event="ready", family=family_name)
    for kind, name, impl in todo[index::count]:
        if name in skip:
            continue
        verdict = Verdict(family_name, kind, name, first_doc_line(impl), catalog_name, ok=False)
        try:
            check_impl(family, name, impl)
        except BadImplementation as exc:
            verdict.message = str(exc)
            _emit(event="verdict", **asdict(verdict))
            continue
        spec = f"{catalog_name}:{name}"
        started = time.process_time()
        for case in cases:
            known = lookup(ledger, case, device_kind, impl=spec)
            if known is not None and kind == "mutant" and not known.only_after_interpreted_launch:
                continue
            _emit(event="case", kind=kind, name=name, case=case.id, family=family_name)
            outcome = run_case(shared, case, device, impl)
            verdict.cases_run += 1
            if outcome.status in ("unsupported", "oom"):  # out of device memory judges nothing
                verdict.unsupported += 1
            elif outcome.status == "fail":
                entry = (case.id, outcome.stage, outcome.message[:500])
                explained = known is not None and known.explains(outcome.stage, outcome.message,
                                                                 outcome.interpreted_launches)
                if kind == "mutant":
                    if explained:  # the device's own failure (an interpreted bf16 dot) judges nothing
                        continue
                    verdict.ok, verdict.case, verdict.stage, verdict.message = True, *entry
                    break
                if explained:
                    verdict.known.append(entry)
                else:
                    verdict.failures.append(entry)
        if kind == "control":
            verdict.ok = not verdict.failures
            if verdict.failures:
                verdict.case, verdict.stage, verdict.message = verdict.failures[0]
        verdict.cpu_s = round(time.process_time() - started, 2)
        _emit(event="verdict", **asdict(verdict))
    _emit(event="done")


def torch_threads(device_kind: str) -> None:
    """One intra-op thread per worker on the host: the workers already fill the cores, and idle
    pool threads spinning for work cost many times the CPU time of the work itself."""
    if device_kind == "cpu":
        import torch

        torch.set_num_threads(1)


# --- the parent: workers in parallel, each watched ------------------------------------------------

@dataclass(frozen=True)
class Job:
    catalog: str
    #: None: the catalog's own FAMILY (read by the worker, so this process never imports it).
    family: str | None
    shard: tuple[int, int] = (0, 1)


def _worker_command(args) -> list[str]:
    return [sys.executable, "-m", "attnsuite.mutate", "--worker", "--device", args.device, "--profile", args.profile,
            "--fuzz-seed", str(args.fuzz_seed), "--fuzz-count", str(args.fuzz_count)]


def _reader(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


class Lane:
    """One worker process at a time, given job after job: a new one only when the last hung or
    died. Starting a worker (torch's import, then the kernels') costs about 2 s of CPU, against
    1-15 s for a catalog: nine catalogs on two lanes start two workers instead of nine."""

    def __init__(self, args):
        self.args = args
        self.proc: subprocess.Popen | None = None

    def _start(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        # Workers already run one per core: an intra-op thread pool per worker would only spin
        # (on a busy 2-core machine, 20x the CPU time of the work itself).
        env.setdefault("OMP_NUM_THREADS", "1")
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(_worker_command(self.args), cwd=ROOT, env=env, text=True, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err, start_new_session=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=_reader, args=(self.proc.stdout, self.lines), daemon=True).start()

    def _give(self, job: Job, skip: set[str]) -> bool:
        """Send ``job`` to the worker (started if there is none); False if it is gone already."""
        if self.proc is None:
            self._start()
        try:
            self.proc.stdin.write(json.dumps({"catalog": job.catalog, "family": job.family, "shard": job.shard,
                                              "skip": sorted(skip)}) + "\n")
            self.proc.stdin.flush()
            return True
        except OSError:  # it died after its last job: the caller starts another
            return False

    def _end(self, kill: bool) -> str:
        """Stop the worker (killed with its process group, or told there is no more work); the
        tail of what it wrote to stderr."""
        proc, self.proc = self.proc, None
        if proc is None:
            return ""
        if kill:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            try:
                proc.stdin.close()
            except OSError:
                pass
        proc.wait()
        self.err.seek(0)
        tail = self.err.read()[-2000:]
        self.err.close()
        return tail

    def _exit_status(self, wait: bool) -> int | None:
        """The worker's exit status; ``wait``: its stdout closed, so it is exiting, but may not have
        exited yet (reading it at once gave None on a loaded machine)."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=2.0) if wait else self.proc.poll()
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        self._end(kill=False)

    def run_job(self, job: Job) -> list[Verdict]:
        """One shard of one catalog, with the worker replaced whenever it hangs or dies."""
        verdicts: list[Verdict] = []
        finished: set[str] = set()
        args = self.args
        while True:
            if not self._give(job, finished):  # it died after its last job: not this job's doing
                self._end(kill=True)
                self._give(job, finished)
            current, why, done, ready = None, None, False, False
            while True:
                # The job's imports and first inputs come before any case: they get their own allowance.
                limit = args.case_timeout if ready else max(args.case_timeout, STARTUP_TIMEOUT)
                try:
                    line = self.lines.get(timeout=limit)
                except queue.Empty:
                    why = f"timeout: no answer within {limit:g} s"
                    break
                if line is None:
                    break
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a stray print of an implementation
                ready = True
                if event.get("event") == "case":
                    current = event
                elif event.get("event") == "verdict":
                    event.pop("event")
                    verdicts.append(Verdict(**event))
                    finished.add(event["name"])
                    current = None
                elif event.get("event") == "done":
                    done = True
                    break
            if done:
                return verdicts
            returncode = self._exit_status(wait=line is None)
            tail = self._end(kill=True)
            if current is None:  # died outside any case: the catalog itself cannot run
                verdicts.append(Verdict(job.family or job.catalog, "catalog", job.catalog, "", job.catalog, ok=False,
                                        message=f"worker exited with {returncode} before finishing: {tail}"))
                return verdicts
            why = why or f"crash: worker exited with {returncode}: {tail.strip().splitlines()[-1:] or ''}"
            stage = "timeout" if why.startswith("timeout") else "crash"
            kind, name = current["kind"], current["name"]
            verdicts.append(Verdict(current["family"], kind, name, "", job.catalog, ok=(kind == "mutant"),
                                    case=current["case"], stage=stage, message=why,
                                    failures=[] if kind == "mutant" else [(current["case"], stage, why)]))
            finished.add(name)


def jobs_for(catalogs: list[tuple[str, str]], jobs: int) -> list[Job]:
    """One job per catalog; catalogs split into shards when there are fewer of them than workers."""
    shards = max(1, -(-jobs // max(1, len(catalogs)))) if len(catalogs) < jobs else 1
    return [Job(cat, fam, (i, shards)) for cat, fam in catalogs for i in range(shards)]


def run(catalogs: list[tuple[str, str]], args) -> list[Verdict]:
    """The jobs over ``args.jobs`` lanes, each taking the next job as it frees up; the verdicts
    in the jobs' order."""
    todo = jobs_for(catalogs, args.jobs)
    pending: queue.Queue = queue.Queue()
    for index, job in enumerate(todo):
        pending.put((index, job))
    results: dict[int, list[Verdict]] = {}

    def lane() -> None:
        worker = Lane(args)
        try:
            while True:
                try:
                    index, job = pending.get_nowait()
                except queue.Empty:
                    return
                results[index] = worker.run_job(job)
        finally:
            worker.close()

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(lambda _: lane(), range(min(args.jobs, len(todo)))))
    return [v for index in range(len(todo)) for v in results[index]]


def summary(verdicts: list[Verdict]) -> str:
    lines = [f"{'family':20} {'kind':8} {'name':44} {'verdict':9} first killing / failing case (stage)"]
    for v in verdicts:
        if v.kind == "mutant":
            word = "killed" if v.ok else "SURVIVED"
            where = f"{v.case} ({v.stage})" if v.ok else f"{v.cases_run} cases run, all passed"
        elif v.kind == "control":
            word = "passed" if v.ok else "FAILED"
            extra = f", {v.unsupported} unsupported" if v.unsupported else ""
            extra += f", {len(v.known)} known device failures" if v.known else ""
            where = (f"{v.cases_run} cases run{extra}" if v.ok
                     else f"{len(v.failures)} failing, first {v.case} ({v.stage}): {v.message[:200]}")
        else:
            word, where = "ERROR", v.message[:300]
        lines.append(f"{v.family:20} {v.kind:8} {v.name:44} {word:9} {where}")
    lines.append("")
    for family in dict.fromkeys(v.family for v in verdicts):
        mutants = [v for v in verdicts if v.family == family and v.kind == "mutant"]
        controls = [v for v in verdicts if v.family == family and v.kind == "control"]
        killed, passed = sum(v.ok for v in mutants), sum(v.ok for v in controls)
        rate = lambda a, n: f"{a}/{n} = {100 * a / n:.0f}%" if n else "none"  # noqa: E731
        lines.append(f"{family:20} kill rate {rate(killed, len(mutants)):14} control pass rate {rate(passed, len(controls))}")
    return "\n".join(lines)


def succeeded(verdicts: list[Verdict]) -> bool:
    return all(v.ok for v in verdicts) and bool(verdicts)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnsuite.mutate", description=__doc__.split("\n\n")[0])
    parser.add_argument("families", nargs="*", help="families whose own catalogs (mutants/<family>.py) run "
                                                    "(default: all, unless --catalog is given)")
    parser.add_argument("--catalog", action="append", default=[], metavar="PACKAGE.MODULE",
                        help="a catalog module (MUTANTS, CONTROLS, FAMILY); repeatable")
    parser.add_argument("--family", default=None, help="the family of every --catalog (default: its FAMILY)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--profile", default="quick", choices=("quick", "full", "fuzz"))
    parser.add_argument("--fuzz-seed", type=int, default=0)
    parser.add_argument("--fuzz-count", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="workers at once (default: CPU count)")
    parser.add_argument("--case-timeout", type=float, default=300.0,
                        help="seconds a worker may stay silent (one case) before it counts as hung")
    parser.add_argument("--json", default=None, help="also write the verdicts here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.device, args.profile, args.fuzz_seed, args.fuzz_count)
    if args.catalog:
        catalogs = [(name, args.family) for name in args.catalog]
    else:
        catalogs = [(f"mutants.{f}", f) for f in (args.families or FAMILIES)]
    started = time.perf_counter()
    verdicts = run(catalogs, args)
    print(summary(verdicts))
    print(f"\n{len(verdicts)} implementations in {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(v) for v in verdicts], indent=1))
    return 0 if succeeded(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
