"""From a launch (kernel, args, meta) to what ``triton.compile`` takes, the way
``JITFunction.run`` computes it, without a driver.

Two generations of the JIT API are handled:
- upstream Triton 3.6 - 3.9: ``create_function_from_signature(sig, params, backend)`` returns
  ``(bound_args, specialization, options)`` and ``JITFunction._pack_args`` turns that into
  ``(options, signature, constexprs, attrs)``;
- triton-ascend 3.2.x (Triton 3.2 base): the binder returns
  ``(bound_args, sig_and_spec, constexpr_vals, non_constexpr_vals, excess_kwargs)``; the
  signature covers non-constexpr arguments, constants are keyed by name, and attributes come from
  ``backend.get_attrs_descriptor(params, values)``.
Tensors are specialized from their dtype and ``data_ptr() % 16`` exactly as at launch, so CPU
tensors (which torch allocates 64-byte aligned) give the same specialization as device tensors.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


@dataclass
class Specialization:
    src: Any            # triton.compiler.ASTSource
    options: dict       # backend options as a dict, for triton.compile(options=...)
    signature: dict     # argument name / path -> type string
    constants: dict     # constexpr and value-specialized arguments


def _upstream(jf, backend, args, meta) -> Specialization:
    from triton import knobs
    from triton.compiler import ASTSource
    from triton.runtime.jit import create_function_from_signature

    kwargs = dict(meta)
    kwargs["debug"] = kwargs.get("debug", jf.debug) or knobs.runtime.debug
    known = backend.parse_options({}).__dict__
    for name in ("instrumentation_mode", "fpsan_homomorphic_casts"):  # what run() adds (3.6-3.9)
        if name in known and hasattr(knobs.compilation, name):
            kwargs[name] = getattr(knobs.compilation, name)
    binder = create_function_from_signature(jf.signature, jf.params, backend)
    bound_args, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = jf._pack_args(backend, kwargs, bound_args, specialization,
                                                          options)
    src = ASTSource(jf, signature, constexprs, attrs)
    return Specialization(src, options.__dict__, signature, constexprs)


def _ascend32(jf, backend, args, meta) -> Specialization:
    from triton.compiler.compiler import ASTSource
    from triton.runtime.jit import create_function_from_signature

    kwargs = dict(meta)
    kwargs["debug"] = kwargs.get("debug", False) or os.environ.get("TRITON_DEBUG", "0") == "1"
    if getattr(jf, "bishengir_option", None):
        kwargs.update(jf.bishengir_option)
    binder = create_function_from_signature(jf.signature, jf.params, backend)
    bound_args, sig_and_spec, _, _, excess_kwargs = binder(*args, **kwargs)
    options = backend.parse_options(kwargs)
    for k in excess_kwargs:
        if k not in options.__dict__:
            raise KeyError(f"Keyword argument {k} was specified but unrecognised")
    bound_vals = tuple(bound_args.values())
    non_constexpr = [p for p in jf.params if not p.is_constexpr]
    sigvals = sig_and_spec[:len(non_constexpr)]
    signature = {p.name: ("*i8" if v == "none" else v) for p, v in zip(non_constexpr, sigvals)}
    attrs = backend.get_attrs_descriptor(jf.params, bound_vals)
    constant_params = attrs.get_constants()
    constants = {p.name: v for v, p in zip(bound_vals, jf.params)
                 if p.is_constexpr or p.num in constant_params or v is None}
    src = ASTSource(jf, signature, constants, attrs)
    return Specialization(src, options.__dict__, signature, constants)


def specialize(jf, backend, args: tuple, meta: dict) -> Specialization:
    """Bind ``args``/``meta`` to ``jf`` for ``backend``; raises what the JIT would raise
    (TypeError for a wrong argument count, KeyError for an unknown keyword)."""
    if hasattr(jf, "_pack_args"):
        return _upstream(jf, backend, args, meta)
    return _ascend32(jf, backend, args, meta)
