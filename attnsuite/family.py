"""What a kernel family tells the harness: its interface, its cases, how to make inputs, how to
call an implementation, and how to compute the reference. Each family lives in
``cases/<name>.py`` and is listed in the registry (``cases/__init__.py``)."""
from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from typing import Callable, Mapping, Sequence

import torch

from .case import Case
from .interfaces import Interface

Tensors = dict[str, torch.Tensor]
OutputSpec = dict[str, tuple[tuple[int, ...], torch.dtype]]


class Family(ABC):
    name: str = ""
    #: The call every implementation must accept (attnsuite/interfaces.py).
    interface: Interface | None = None
    cases: Sequence[Case] = ()
    #: Implementations by name; the first is the default (``--impl`` replaces it). Other libraries'
    #: kernels (attnsuite/ecosystem/: torch SDPA, flex, FlagGems, vLLM, FlashInfer, torch_npu)
    #: are registered here too.
    impls: Mapping[str, Callable] = {}

    @abstractmethod
    def label(self, params: Mapping) -> str:
        """The readable id of a case with these parameters (``family[label]``)."""

    def skip_reason(self, case: Case) -> str | None:
        """Why the spec says not to run this case (None: run it)."""
        return None

    def fuzz(self, rng) -> dict | None:
        """Parameters of one case drawn at random (``random.Random``) from the family's legal
        input space, for ``--profile fuzz``; None: the family has no fuzz generator."""
        return None

    def fuzz_classes(self, params: dict, rng) -> dict:
        """``params`` (a ``fuzz`` draw) moved, now and then, into the input classes that need a
        value of a parameter the draw itself never takes (a scale, a score range, a GQA group or
        page size that is not a power of two). Drawn from the same ``rng`` after ``fuzz``, so
        the draw's own parameters do not change."""
        return params

    @abstractmethod
    def make_inputs(self, case: Case, gen: torch.Generator) -> Tensors:
        """Inputs drawn from ``gen`` only (the harness seeds it from the case id), on the CPU.
        A family may also take ``device`` (a torch.device; None: the host) and build its bulk
        tensors there (``cases/_attention.randn``: drawn by the device's own generator, seeded
        from ``gen``) and do costly derived work there (mustafar's reference compressor). Its
        tensors below the bulk size, and what ``gen`` draws for them, do not depend on it."""

    @abstractmethod
    def output_specs(self, case: Case, inputs: Tensors) -> OutputSpec:
        """Shape and dtype of every output the case checks (e.g. ``o`` and, if asked, ``lse``)."""

    @abstractmethod
    def call(self, impl: Callable, case: Case, inputs: Tensors, outputs: Tensors) -> Tensors:
        """Run ``impl`` writing into ``outputs`` (NaN-filled); return the tensors it produced."""

    @abstractmethod
    def reference(self, case: Case, inputs: Tensors, compute_dtype: torch.dtype) -> Tensors:
        """The same outputs computed by the plain PyTorch reference in ``compute_dtype``."""

    def score_bound(self, case: Case, inputs: Tensors) -> float | None:
        """An upper bound on |score| of the softmax behind output ``o`` (attnsuite/tolerance.py:
        the error fp32 scores of that size cost), or None when ``o`` is no softmax output."""
        return None

    #: ``compare(case, inputs, produced, reference, result) -> [problem, ...]``, for a family
    #: whose outputs are not judged element by element under attnsuite/tolerance.py (a top-k is
    #: a set: cases/dsa_topk_indexer.py). It fills ``result.metrics`` / ``headroom`` /
    #: ``tolerance`` as the runner's own comparison does. None: the runner's comparison.
    compare: Callable | None = None

    def launches_kernel(self, case: Case) -> bool:
        """False for cases whose operation is plain PyTorch: compile-only skips them."""
        return True

    def quality(self, case: Case, inputs: Tensors, produced: Tensors) -> dict | None:
        """Approximation figures for the report's quality section (never pass/fail): how far a
        lossy format's result is from the lossless ground truth. None: the family has none."""
        return None

    # -- benchmarks (attnsuite/bench) -------------------------------------------------------
    def vendor_problem(self, case: Case, inputs: Tensors) -> dict | None:
        """The dense attention this case is equivalent to, for the vendor baselines:
        ``{"q": [B, Hq, Sq, D], "k"/"v": [B, Hkv, Sk, D], "causal": bool, "note": str | None}``,
        built from ``inputs`` (gathers happen here, outside any timing). None: no equivalent."""
        return None

    def work(self, case: Case, inputs: Tensors) -> dict:
        """``{"flops": ..., "bytes": ...}`` the kernel must do / move at least (either may be
        absent): TFLOP/s for compute-bound families, GB/s for memory-bound ones."""
        return {}

    def extra_baselines(self, case: Case, inputs: Tensors, impl: Callable) -> dict[str, tuple]:
        """Family-specific baselines: name -> (zero-argument callable, note), or (callable,
        note, key) where the callable's device time depends only on ``key`` (hashable): the
        benchmark times it for the first sweep point with that key and implementation in a
        process and reuses the figure on the others, with a note."""
        return {}

    def sweep(self, case: Case) -> dict | None:
        """Which report chart a bench case feeds: ``{"name", "series", "x"}`` or None."""
        return None

    def reference_cost_key(self, case: Case, inputs: Tensors):
        """What the reference's device time depends on, where that is less than the whole case
        (hashable), else None. As for a keyed extra baseline, a benchmark sweep times the
        reference for its first point with that key in a process and reuses the figure, with a
        note, on the others; a headline case always times its own."""
        return None

    def default_impl(self) -> tuple[str, Callable]:
        name = next(iter(self.impls))
        return name, self.impls[name]


def inputs_on(family, case: Case, device) -> Tensors:
    """The case's inputs placed on ``device`` (an attnsuite device), views kept. A family whose
    ``make_inputs`` takes ``device`` gets the device's torch.device (any object with a
    ``make_inputs``, a wrapper that caches them included, is called through its own)."""
    kwargs = {}
    try:
        if "device" in inspect.signature(family.make_inputs).parameters:
            kwargs["device"] = device.torch_device
    except (TypeError, ValueError):
        pass
    return {k: device.place(v) for k, v in family.make_inputs(case, case.generator(), **kwargs).items()}
