"""Our records -> FlashInfer-Trace traces (``--trace-out DIR``), written at session end.

Only cases that came from a workload (``--workloads``) are traced: a trace names its Definition
and embeds its Workload, and our catalog cases have neither (a Definition derived per family
would be ours, not the ecosystem's, and would match no one's solutions). Layout, as
``TraceSet.from_path`` reads it: ``DIR/traces/<op_type>/<definition>.jsonl`` (appended, one
trace a line, as their ``append_jsonl_file`` does) and ``DIR/definitions/<op_type>/<name>.json``
copied from the input when DIR lacks it. Workload entries are not copied: the traces embed them,
and safetensors paths in them are relative to the input dataset, so ``--trace-out`` pointed at
that dataset keeps them valid.

Status, from a numeric-mode conformance record (``status_of``):

- pass, xpass -> PASSED (xpass: the result was right where the ledger expected a failure);
- fail / xfail at stage ``numeric`` -> INCORRECT_NUMERICAL, or INCORRECT_SHAPE when the
  comparison found a shape that is not the reference's;
- fail / xfail at ``compile`` -> COMPILE_ERROR; at ``validate``, ``launch``, ``first_call``,
  ``impl``, ``contract`` (the implementation raised, or ignored its output buffer) -> RUNTIME_ERROR;
- crash -> RUNTIME_ERROR; timeout -> TIMEOUT;
- no trace: skip (``Unsupported``, a workload not mapped), oom (never a kernel failure here),
  not_run, error, and failures at ``inputs``/``reference``/``compare``/``teardown`` (the harness
  failed, not the solution). FlashInfer-Trace has no "skipped" status; the terminal line counts them.

Correctness: the largest ``max_abs_err`` and ``max_rel_err`` over the case's outputs; ``extra``
keeps our tolerance verdict per output (allowed error, headroom) and says that our LSE is natural
log where their definitions' is base 2 (abs errors of ``lse`` are ours, unscaled). Performance
(an object required with PASSED, each of its fields optional): only what was measured. A
benchmark record of the same case, implementation and kind of device gives ``latency_ms`` (its
device-time median, ``bench.kernel.device.median_ms``) and, when the reference baseline was timed
too, ``reference_latency_ms`` and ``speedup_factor``; a conformance run alone gives an empty
object and a log line saying it was not timed (a 0.0 would read as a measurement). Environment:
``hardware`` the device name, ``libs`` torch / triton (or triton-ascend) / python / driver.
The ``solution`` names our implementation: ``attnsuite:<family>:<impl>`` (no Solution file).
"""
from __future__ import annotations

import json
import math
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Iterable

from . import schema

RUNTIME_STAGES = ("validate", "launch", "first_call", "impl", "contract")


def status_of(rec: dict) -> str | None:
    """The FlashInfer-Trace status of a conformance record (None: not traced; module doc)."""
    if rec.get("mode", "numeric") != "numeric":
        return None
    outcome, stage, message = rec.get("outcome"), rec.get("stage"), rec.get("message") or ""
    if outcome in ("pass", "xpass"):
        return "PASSED"
    if outcome in ("fail", "xfail"):
        if stage == "numeric":
            return "INCORRECT_SHAPE" if "!= reference shape" in message else "INCORRECT_NUMERICAL"
        if stage == "compile":
            return "COMPILE_ERROR"
        if stage in RUNTIME_STAGES:
            return "RUNTIME_ERROR"
        return None
    if outcome == "crash":
        return "RUNTIME_ERROR"
    if outcome == "timeout":
        return "TIMEOUT"
    return None


def _finite_or_string(x: float):
    """pydantic's ``ser_json_inf_nan="strings"`` form of a float (their Correctness model)."""
    if x is None or isinstance(x, str):
        return x
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return float(x)


def correctness(rec: dict) -> dict:
    metrics = rec.get("metrics") or {}
    abs_errs = [m.get("max_abs_err") for m in metrics.values() if m.get("max_abs_err") is not None]
    rel_errs = [m.get("max_rel_err") for m in metrics.values() if m.get("max_rel_err") is not None]

    def worst(values):
        values = [v for v in values if not isinstance(v, str)]
        if any(math.isnan(v) for v in values):
            return math.nan
        return max(values, default=0.0)

    per_output = {name: {k: _finite_or_string(m.get(k)) for k in ("max_abs_err", "max_rel_err", "allowed",
                                                                  "headroom", "baseline_err")}
                  for name, m in metrics.items()}
    extra = {"attnsuite_tolerance": (rec.get("tolerance") or {}).get("policy"), "outputs": per_output,
             "lse_base": "e (natural log; FlashInfer-Trace definitions return log2)" if "lse" in metrics else None}
    if not metrics:  # a numeric failure with no figures (a non-finite output stops before them)
        extra["note"] = "no per-output figures in the record"
    return {"max_relative_error": _finite_or_string(worst(rel_errs)),
            "max_absolute_error": _finite_or_string(worst(abs_errs)), "extra": extra}


def performance(bench: dict | None) -> dict:
    """The measured fields only: none without a benchmark, no reference figures without its time."""
    kernel = (((bench or {}).get("kernel") or {}).get("device") or {}).get("median_ms")
    if not kernel:
        return {}
    found = {"latency_ms": float(kernel)}
    ref = (((bench.get("baselines") or {}).get("reference") or {}).get("device") or {}).get("median_ms")
    if ref:
        found.update(reference_latency_ms=float(ref), speedup_factor=float(ref) / float(kernel))
    return found


def environment(rec: dict) -> dict:
    env = rec.get("env") or {}
    libs = {k: str(env[k]) for k in ("torch", "triton", "triton_ascend", "python", "driver", "torch_npu")
            if env.get(k)}
    hardware = (env.get("device_name") or rec.get("device") or "unknown").strip().replace(" ", "_")
    return {"hardware": hardware, "libs": libs}


def trace_of(rec: dict, bench_rec: dict | None) -> dict | None:
    """One trace for one record of a workload case (None when the record is not traced)."""
    fi = (rec.get("params") or {}).get("fi")
    status = status_of(rec)
    if not fi or status is None:
        return None
    log = [f"attnsuite {rec.get('family')} case {rec.get('case_id')} ({rec.get('impl')}): {rec.get('outcome')}"
           + (f" at {rec['stage']}" if rec.get("stage") else "")]
    if rec.get("message"):
        log.append(rec["message"])
    known = rec.get("known_failure")
    if known:
        log.append(f"known failure: {known.get('id') if isinstance(known, dict) else known}")
    evaluation = {"status": status, "environment": environment(rec),
                  "timestamp": rec.get("finished_at") or rec.get("started_at") or "unknown", "log": ""}
    if status in ("PASSED", "INCORRECT_NUMERICAL"):
        evaluation["correctness"] = correctness(rec)
    if status == "PASSED":
        bench = (bench_rec or {}).get("bench")
        evaluation["performance"] = performance(bench)
        log.append("performance: device time of the benchmark run (median)" if evaluation["performance"]
                   else "performance: not timed in this run (no benchmark record): no figures given")
    if rec.get("repro"):
        log.append(f"reproduce: {rec['repro']}")
    evaluation["log"] = "\n".join(log)
    return {"definition": fi["definition"], "workload": fi["workload"],
            "solution": f"attnsuite:{rec.get('family')}:{rec.get('impl')}", "evaluation": evaluation}


def _bench_key(rec: dict) -> tuple:
    # The card's name, not its index: under xdist a case's benchmark may run on another card of
    # the same kind than its conformance check.
    return rec.get("case_id"), rec.get("impl"), rec.get("device"), (rec.get("env") or {}).get("device_name")


def write_traces(records: Iterable[dict], out_dir: str | Path) -> str:
    """Write the traces of ``records`` under ``out_dir``; returns one line saying what was written.
    Every trace is checked against the transcribed schema first: one that is not valid is a bug
    here, and raises rather than joining someone's database."""
    records = list(records)
    out = Path(out_dir)
    benches = {}
    for rec in records:
        if rec.get("mode") == "bench" and rec.get("bench") and (rec.get("params") or {}).get("fi"):
            benches[_bench_key(rec)] = rec
    by_definition: dict[tuple[str, str], list[dict]] = defaultdict(list)
    sources: dict[str, str | None] = {}
    untraced = 0
    for rec in records:
        fi = (rec.get("params") or {}).get("fi")
        if not fi or rec.get("mode") == "bench":
            continue
        trace = trace_of(rec, benches.get(_bench_key(rec)))
        if trace is None:
            untraced += 1
            continue
        problems = schema.validate_trace(trace)
        if problems:
            raise ValueError(f"trace of {rec.get('case_id')} is not valid FlashInfer-Trace: {problems}")
        by_definition[(fi["op_type"], fi["definition"])].append(trace)
        sources[fi["definition"]] = fi.get("definition_file")
    for (op_type, name), traces in sorted(by_definition.items()):
        path = out / "traces" / op_type / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            for trace in traces:
                fh.write(json.dumps(trace, allow_nan=False, sort_keys=False) + "\n")
        definition = out / "definitions" / op_type / f"{name}.json"
        src = sources.get(name)
        if not definition.exists() and src and Path(src).is_file():
            definition.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, definition)
    n = sum(len(t) for t in by_definition.values())
    return (f"FlashInfer-Trace: {n} traces for {len(by_definition)} definitions in {out / 'traces'}"
            + (f"; {untraced} workload records not traced (skipped, unsupported, oom, not run or a harness error)"
               if untraced else ""))


def main(argv=None) -> int:
    """``python -m attnsuite.flashinfer_trace.traces OUT_DIR RUN_DIR...``: traces from stored records."""
    import argparse

    from ..records import read_records

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("out_dir")
    parser.add_argument("runs", nargs="+", help="run directories or .jsonl record files")
    args = parser.parse_args(argv)
    print(write_traces(read_records(args.runs), args.out_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
