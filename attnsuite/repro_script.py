"""A stand-alone reproduction of a library's failing case, to file upstream.

For a case an ecosystem implementation (one with ``.library``, attnsuite/ecosystem) failed, the
suite writes ``<dir>/<family>/<case label>.<impl>.py`` and, beside it, a ``.pt`` holding exactly
what the suite passed to the implementation (the inputs, strided views and all, and the NaN-filled
output buffers inside their NaN guards), the float64 reference of every judged output, and the
error the suite allows each one. The script loads that file, calls the adapter (the library call
with the suite's layout mapped onto it; its source is quoted in the script) and checks the outputs
against the reference: it needs torch, the library and the adapter's module, nothing else.

The call is captured, not re-derived: the family's own ``call`` runs with a stand-in that records
its arguments, so the script passes what the suite passed.
"""
from __future__ import annotations

import inspect
import re
import textwrap
from pathlib import Path

import torch

from .buffers import guarded_nan_buffer
from .family import inputs_on


#: Scripts one process writes per (family, implementation): a library that fails a whole family
#: needs a few reproductions, not one .pt per case of the full profile.
MAX_PER_IMPL = 8
#: Inputs larger than this are not saved (the repro command still reproduces the case).
MAX_BYTES = 512 * 2**20


class _Captured(Exception):
    pass


class _Capture:
    """Stands in for the implementation inside ``family.call``: keeps the call, then stops it."""

    def __init__(self):
        self.args, self.kwargs = None, None

    def __call__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs
        raise _Captured


def supported(family, impl) -> str | None:
    """Why no script can be written for this implementation (None: one can)."""
    if getattr(getattr(family, "interface", None), "methods", ()):
        return f"{family.name}: an implementation of several methods; no single call to reproduce"
    if "<" in getattr(impl, "__qualname__", "<") or not getattr(impl, "__module__", None):
        return "the implementation cannot be imported by name (a lambda or a local function)"
    return None


def file_name(case_id: str, impl: str) -> str:
    label = case_id.split("[", 1)[1].rstrip("]") if "[" in case_id else case_id
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", f"{label}.{impl}") + ".py"


def capture(family, case, device) -> tuple[tuple, dict, dict, dict]:
    """(args, kwargs, inputs, outputs): the call the family makes on freshly built inputs (the
    case's generator makes the same ones the case ran on), and the output buffers it passes
    (name -> the view inside its guards)."""
    inputs = inputs_on(family, case, device)
    outputs = {name: guarded_nan_buffer(shape, dtype, device.torch_device)[0]
               for name, (shape, dtype) in family.output_specs(case, inputs).items()}
    stand_in = _Capture()
    try:
        family.call(stand_in, case, inputs, outputs)
    except _Captured:
        pass
    if stand_in.args is None:
        raise RuntimeError(f"{family.name}.call made no call to the implementation")
    return stand_in.args, stand_in.kwargs, inputs, outputs


def write(family, case, impl_name: str, impl, device, metrics: dict, message: str, directory: Path) -> Path:
    """Write the script and its ``.pt``; returns the script's path."""
    why = supported(family, impl)
    if why:
        raise ValueError(why)
    args, kwargs, inputs, outputs = capture(family, case, device)
    size = sum(t.untyped_storage().nbytes() for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor))
    if size > MAX_BYTES:
        raise ValueError(f"the case's tensors take {size / 2**20:.0f} MiB, over the {MAX_BYTES / 2**20:.0f} MiB a "
                         f"script saves; run the repro command")
    ref = family.reference(case, inputs, torch.float64)
    # Where each judged output comes back: the buffer passed as that keyword (the suite judges
    # the caller's buffer), else its position in the returned tuple.
    where = {}
    for i, name in enumerate(ref):
        key = next((k for k, v in kwargs.items() if v is outputs.get(name)), None)
        where[name] = key if key is not None else i
    allowed = {name: float(metrics[name]["allowed"]) for name in ref if "allowed" in metrics.get(name, {})}
    library = impl.library
    directory = Path(directory) / family.name
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / file_name(case.id, impl_name)
    torch.save({"args": list(args), "kwargs": kwargs, "reference": {n: t.detach() for n, t in ref.items()},
                "where": where, "allowed": allowed, "case_id": case.id}, script.with_suffix(".pt"))
    script.write_text(_SCRIPT.format(
        library=library.name, version=library.installed_version() or "not installed",
        written_against=library.written_against, case_id=case.id, impl=impl_name,
        module=impl.__module__, qualname=impl.__qualname__,
        message=textwrap.indent(textwrap.fill(_docstring_safe(message or ""), 96), "    "),
        outputs=", ".join(ref), source=textwrap.indent(_source(impl), "#   "),
        device=str(device.torch_device)))
    return script


def _docstring_safe(text: str) -> str:
    """Text that cannot end or escape out of the script's docstring."""
    return text.replace("\\", "\\\\").replace('"' * 3, "'" * 3)


def _source(impl) -> str:
    try:
        return inspect.getsource(impl).rstrip()
    except (OSError, TypeError):
        return f"(source of {impl.__module__}.{impl.__qualname__} not available)"


_SCRIPT = '''\
"""Reproduces a failure of {library} {version} (adapter written against {written_against}) on the
attnsuite case {case_id}, implementation {impl!r}.

Run: python THIS_FILE [--device cpu|cuda|...]   (exit status 1: the failure reproduced)
Needs: torch, {library}, and the adapter's module {module} (attnsuite's adapter: the library call
with the suite's layout, scale and LSE base mapped onto it; quoted at the bottom).

What it checks, for each output ({outputs}):
  * the output against the reference computed by attnsuite's references/ in float64 (saved in
    the .pt beside this file): max |out - ref| must not exceed the error the suite allows for
    this case (twice the error of plain PyTorch in the input dtype, plus the dtype's unit
    roundoff times max(1, max |ref|); also saved);
  * no NaN or Inf where the reference is finite, and the same infinity where it is infinite;
  * nothing written outside the output buffers (they sit inside NaN guards, saved with them).
The inputs are exactly what the suite passed (strided views kept), from the .pt beside this file.

What the suite reported:
{message}
"""
import argparse
import sys
from pathlib import Path

import torch

from {module} import {qualname} as implementation

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="{device}")
device = parser.parse_args().device
saved = torch.load(Path(__file__).with_suffix(".pt"), map_location=device, weights_only=True)
args, kwargs = saved["args"], saved["kwargs"]
returned = implementation(*args, **kwargs)
if device.startswith("cuda"):
    torch.cuda.synchronize()

failed = False
for name, ref in saved["reference"].items():
    where = saved["where"][name]
    out = kwargs[where] if isinstance(where, str) else returned[where]
    got = out.double()
    finite = torch.isfinite(ref)
    bad_nonfinite = int((finite & ~torch.isfinite(got)).sum() + (~finite & (got != ref)).sum())
    err = float((got - ref)[finite & torch.isfinite(got)].abs().max()) if finite.any() else 0.0
    allowed = saved["allowed"].get(name)
    ok = bad_nonfinite == 0 and (allowed is None or err <= allowed)
    print(f"{{name}}: max |out - ref| = {{err:.3e}}, allowed {{allowed if allowed is None else format(allowed, '.3e')}}, "
          f"non-finite where the reference is not (or the wrong infinity): {{bad_nonfinite}}"
          f"  -> {{'ok' if ok else 'FAIL'}}")
    if isinstance(where, str):
        storage = torch.empty(0, dtype=out.dtype, device=out.device).set_(out.untyped_storage())
        inside = torch.zeros(storage.numel(), dtype=torch.bool, device=out.device)
        inside[out.storage_offset():out.storage_offset() + out.numel()] = True
        outside = int((~torch.isnan(storage[~inside])).sum())
        if outside:
            print(f"{{name}}: {{outside}} elements written outside the output buffer  -> FAIL")
            ok = False
    failed |= not ok
print("FAILED: the failure reproduces" if failed else "passed: the failure did not reproduce here")
sys.exit(1 if failed else 0)

# The adapter ({module}.{qualname}):
{source}
'''
