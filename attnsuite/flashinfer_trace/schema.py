"""The FlashInfer-Trace schema, transcribed from flashinfer-bench's pydantic models (commit in
``attnsuite/flashinfer_trace/__init__.py``), and a validator of the fields this package reads
and writes. Field names, enum values and the status/correctness/performance rule
(``Evaluation._validate_status_correctness_performance``) are theirs; the validator returns a
list of problems (empty: valid) rather than raising, so a test can show every one at once.
"""
from __future__ import annotations

import math

#: ``EvaluationStatus`` (trace.py). TIMEOUT is in the model, not yet in docs/flashinfer-trace/trace.mdx.
STATUSES = ("PASSED", "INCORRECT_SHAPE", "INCORRECT_NUMERICAL", "INCORRECT_DTYPE", "RUNTIME_ERROR",
            "COMPILE_ERROR", "TIMEOUT")
#: ``DType`` (definition.py).
DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1", "int64", "int32",
          "int16", "int8", "bool")
#: Top-level fields: (required, optional) per model.
DEFINITION_FIELDS = (("name", "op_type", "axes", "inputs", "outputs", "reference"),
                     ("tags", "description", "constraints"))
WORKLOAD_FIELDS = (("axes", "inputs", "uuid"), ())
TRACE_FIELDS = (("definition", "workload"), ("solution", "evaluation"))
EVALUATION_FIELDS = (("status", "environment", "timestamp"), ("log", "correctness", "performance"))
CORRECTNESS_FIELDS = ((), ("max_relative_error", "max_absolute_error", "extra"))
PERFORMANCE_FIELDS = ((), ("latency_ms", "reference_latency_ms", "speedup_factor"))
ENVIRONMENT_FIELDS = (("hardware",), ("libs",))
#: Workload input descriptors by ``type``: their fields besides ``type``.
INPUT_TYPES = {"random": (), "scalar": ("value",), "safetensors": ("path", "tensor_key")}
#: pydantic writes non-finite correctness floats as strings (``ser_json_inf_nan="strings"``).
NONFINITE = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def _fields(obj, fields, where: str) -> list[str]:
    required, optional = fields
    if not isinstance(obj, dict):
        return [f"{where}: expected an object, got {type(obj).__name__}"]
    problems = [f"{where}: missing field {name!r}" for name in required if name not in obj]
    problems += [f"{where}: unknown field {name!r}" for name in obj if name not in required + optional]
    return problems


def _nonempty(value, where: str) -> list[str]:
    return [] if isinstance(value, str) and value else [f"{where}: must be a non-empty string"]


def _float(value, where: str, *, nonneg: bool = True, nonfinite: bool = False) -> list[str]:
    if nonfinite and isinstance(value, str) and value in NONFINITE:
        value = NONFINITE[value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return [f"{where}: must be a number, got {value!r}"]
    if not nonfinite and not math.isfinite(value):
        return [f"{where}: must be finite, got {value!r}"]
    if nonneg and value < 0:
        return [f"{where}: must be >= 0, got {value!r}"]
    return []


def validate_definition(d) -> list[str]:
    problems = _fields(d, DEFINITION_FIELDS, "definition")
    if problems:
        return problems
    problems += _nonempty(d["name"], "definition.name") + _nonempty(d["op_type"], "definition.op_type")
    for name, axis in d["axes"].items():
        if not isinstance(axis, dict) or axis.get("type") not in ("const", "var"):
            problems.append(f"definition.axes.{name}: type must be 'const' or 'var'")
        elif axis["type"] == "const" and not (isinstance(axis.get("value"), int) and axis["value"] >= 0):
            problems.append(f"definition.axes.{name}: a const axis needs a non-negative integer value")
    for group in ("inputs", "outputs"):
        for name, spec in d[group].items():
            where = f"definition.{group}.{name}"
            problems += _fields(spec, (("shape", "dtype"), ("description",)), where)
            if not isinstance(spec, dict):
                continue
            if spec.get("dtype") not in DTYPES:
                problems.append(f"{where}: dtype {spec.get('dtype')!r} not one of {DTYPES}")
            shape = spec.get("shape")
            if shape is not None:
                problems += [f"{where}: shape names undefined axis {a!r}" for a in shape if a not in d["axes"]]
    if set(d["inputs"]) & set(d["outputs"]):
        problems.append("definition: input and output names overlap")
    if "def run(" not in d["reference"]:
        problems.append("definition.reference: must define a top-level function 'run'")
    return problems


def validate_workload(w, where: str = "workload") -> list[str]:
    problems = _fields(w, WORKLOAD_FIELDS, where)
    if problems:
        return problems
    problems += _nonempty(w["uuid"], f"{where}.uuid")
    for name, value in w["axes"].items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            problems.append(f"{where}.axes.{name}: must be a non-negative integer, got {value!r}")
    for name, spec in w["inputs"].items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if kind not in INPUT_TYPES:
            problems.append(f"{where}.inputs.{name}: type must be one of {sorted(INPUT_TYPES)}")
            continue
        problems += _fields(spec, (("type", *INPUT_TYPES[kind]), ()), f"{where}.inputs.{name}")
    return problems


def validate_evaluation(e, where: str = "evaluation") -> list[str]:
    problems = _fields(e, EVALUATION_FIELDS, where)
    if problems:
        return problems
    status = e["status"]
    if status not in STATUSES:
        problems.append(f"{where}.status: {status!r} not one of {STATUSES}")
    problems += _nonempty(e["timestamp"], f"{where}.timestamp")
    if not isinstance(e.get("log", ""), str):
        problems.append(f"{where}.log: must be a string")
    env = e["environment"]
    problems += _fields(env, ENVIRONMENT_FIELDS, f"{where}.environment")
    if isinstance(env, dict):
        problems += _nonempty(env.get("hardware"), f"{where}.environment.hardware")
        libs = env.get("libs", {})
        if not isinstance(libs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in libs.items()):
            problems.append(f"{where}.environment.libs: must map names to version strings")
    correctness, performance = e.get("correctness"), e.get("performance")
    if correctness is not None:
        problems += _fields(correctness, CORRECTNESS_FIELDS, f"{where}.correctness")
        for key in ("max_relative_error", "max_absolute_error"):
            if isinstance(correctness, dict) and key in correctness:
                problems += _float(correctness[key], f"{where}.correctness.{key}", nonfinite=True)
    if performance is not None:
        problems += _fields(performance, PERFORMANCE_FIELDS, f"{where}.performance")
        for key in PERFORMANCE_FIELDS[1]:
            if isinstance(performance, dict) and key in performance:
                problems += _float(performance[key], f"{where}.performance.{key}")
    # The nullable table of docs/flashinfer-trace/trace.mdx, as the model enforces it.
    need_c = status in ("PASSED", "INCORRECT_NUMERICAL")
    need_p = status == "PASSED"
    if need_c != (correctness is not None):
        problems.append(f"{where}: correctness must be {'present' if need_c else 'absent'} when status is {status}")
    if need_p != (performance is not None):
        problems.append(f"{where}: performance must be {'present' if need_p else 'absent'} when status is {status}")
    return problems


def validate_trace(t) -> list[str]:
    problems = _fields(t, TRACE_FIELDS, "trace")
    if problems:
        return problems
    problems += _nonempty(t["definition"], "trace.definition")
    problems += validate_workload(t["workload"], "trace.workload")
    if t.get("solution") is not None:
        problems += _nonempty(t["solution"], "trace.solution")
    if t.get("evaluation") is not None:
        problems += validate_evaluation(t["evaluation"], "trace.evaluation")
    return problems
