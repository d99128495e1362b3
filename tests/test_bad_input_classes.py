"""Bad input by class, over every public entry point of every family, cold and after a cached
correct call of the same shapes (the lean path of ``kernels._callcache``):

- index arrays whose int32 arithmetic would overflow (tables that wrap around 2**31 and so look
  ordered in int32, entries near 2**31, sequences longer than int32 token positions reach), and
  tensors whose rows along S reach past the int32 row offsets of a portable kernel;
- a softmax scale finite as a Python float but not as float32 after the kernels' log2(e) factor;
- an ``out``/``lse`` buffer over the memory of an input (or of each other) through a second
  storage object;
- a wrongly typed argument equal in value to the correct one (``1`` for ``True``, ``16.0`` for
  ``16``) after the correct one was cached;
- tensors on the ``meta`` device.

Each gets a clear error naming the argument and no kernel launch. The legal neighbours of each
class (zero and negative scales, the largest scale that fits, outputs beside an input in one
buffer) reach the launch, and a real run leaves the memory around out/lse untouched.
"""
from __future__ import annotations

import dataclasses
import importlib
import math
import re
from typing import Callable

import numpy as np
import pytest
import torch

import kernels._callcache
import kernels._checks
import kernels.settings
from attnsuite import registry
from attnsuite.buffers import guarded_nan_buffer, guards_intact, poison
from kernels import mustafar_format
from kernels.block_sparse import block_sparse
from kernels.decode import decode
from kernels.dsa_sparse_attention import dsa_sparse_attention
from kernels.dsa_topk_indexer import dsa_topk_indexer
from kernels.magicpig_decode import magicpig_decode
from kernels.mla_paged import mla_paged_decode, mla_paged_prefill
from kernels.mustafar import mustafar_decode, mustafar_keys, mustafar_values
from kernels.paged_decode import paged_decode
from kernels.prefill import prefill
from kernels.prefill_varlen import prefill_packed, prefill_padded
from kernels.sparse_decode import sparse_decode
from kernels.sparse_paged_decode import sparse_paged_decode

KERNEL_MODULES = ("kernels.prefill", "kernels.prefill_varlen", "kernels.decode", "kernels.paged_decode",
                  "kernels.sparse_decode", "kernels.sparse_paged_decode", "kernels.magicpig_decode",
                  "kernels.block_sparse", "kernels.mustafar", "kernels._paged", "kernels.mla_paged",
                  "kernels.dsa_sparse_attention", "kernels.dsa_topk_indexer")
BIG = 2**31 - 1
META = torch.device("meta")

interpreted = pytest.mark.skipif(not kernels._checks.is_interpret(),
                                 reason="needs TRITON_INTERPRET=1 (the cpu device)")


# ----------------------------------------------------------------------------- valid calls

def i32(*values):
    return torch.tensor(values, dtype=torch.int32)


def randn(*shape, dtype=torch.float16, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@dataclasses.dataclass
class Entry:
    """One public entry point and a valid call of it: positional arguments by name, keywords,
    and the shapes of its output buffers (``lse`` absent where the entry has none; an entry whose
    second output has another name, such as the indexer's fp32 ``logits``, names it in
    ``second``). ``cached``: the wrapper keeps a call cache (``kernels._callcache``), so the
    classes are also tried after a cached correct call; a wrapper without one validates every
    call from scratch and has no cached mode to try (``test_uncached_entries_keep_no_call_cache``
    holds that to be true)."""
    fn: Callable
    args: dict
    kwargs: dict
    out: tuple
    lse: tuple = None
    out_dtype: torch.dtype = torch.float16
    second: str = "lse"
    cached: bool = True

    @property
    def name(self) -> str:
        return self.fn.__name__

    def call(self, **change):
        args = {n: change.get(n, v) for n, v in self.args.items()}
        kwargs = {**self.kwargs, **{n: v for n, v in change.items() if n not in self.args}}
        return self.fn(*args.values(), **kwargs)

    def tensors(self) -> dict:
        """Every input tensor by the name messages use (a compressed cache's buffers as kc.packed)."""
        out = {}
        for name, x in {**self.args, **self.kwargs}.items():
            if isinstance(x, torch.Tensor):
                out[name] = x
            elif isinstance(x, mustafar_format.Compressed):
                out.update(x.tensors(prefix=f"{name}."))
        return out

    def with_tensor(self, name: str, t: torch.Tensor) -> dict:
        """The change that puts ``t`` in place of the input ``name`` (a buffer of a cache too)."""
        if "." in name:
            cache, field = name.split(".")
            return {cache: dataclasses.replace({**self.args, **self.kwargs}[cache], **{field: t})}
        return {name: t}

    def outputs(self) -> dict:
        out = {"out": torch.empty(self.out, dtype=self.out_dtype)}
        if self.lse is not None:
            out[self.second] = torch.empty(self.lse, dtype=torch.float32)
        return out


def paged_args(B=3, Hq=2, P=5, page=4, D=16):
    """Three sequences: 6 tokens on pages [3, 1], 3 on page [0], none; a pool of 5 pages."""
    return dict(q=randn(B, Hq, D), kv_cache=randn(P, 2, 1, page, D, seed=1),
                kv_page_indptr=i32(0, 2, 3, 3), kv_page_indices=i32(3, 1, 0))


def sparse_lists(B=3, Hq=2, L=3):
    return dict(sparse_ind=torch.tensor([[[0, 5, 2]] * Hq, [[2, 0, 1]] * Hq, [[0, 0, 0]] * Hq],
                                        dtype=torch.int32)[:B, :, :L],
                sparse_nnz=torch.tensor([[3] * Hq, [2] * Hq, [0] * Hq], dtype=torch.int32)[:B])


def mla_args(prefill: bool = False) -> dict:
    """paged_args' table over a latent cache (Dc = Dr = 16): sequences of 6, 3 and 0 tokens;
    prefill queries the last 2 and 1 of the first two."""
    table = {n: t for n, t in paged_args().items() if n != "q" and n != "kv_cache"}
    cache = dict(ckv_cache=randn(5, 4, 16, seed=1), kpe_cache=randn(5, 4, 16, seed=2))
    rows = dict(qo_indptr=i32(0, 2, 3, 3)) if prefill else {}
    return dict(q_nope=randn(3, 2, 16), q_pe=randn(3, 2, 16, seed=3), **rows, **cache, **table,
                kv_last_page_len=i32(2, 3, 0))


def dsa_indexer_args() -> dict:
    """Two sequences of 6 and 3 tokens on pages [2, 0] and [1] of a pool of three 4-slot pages
    (fp8 keys with fp32 per-token scales); the top 4."""
    fp8 = torch.float8_e4m3fn
    return dict(q_idx=randn(2, 2, 16, dtype=torch.float32).to(fp8),
                k_cache=randn(3, 4, 16, dtype=torch.float32, seed=1).to(fp8),
                weights=randn(2, 2, dtype=torch.float32, seed=2), seq_lens=i32(6, 3),
                block_table=torch.tensor([[2, 0], [1, 0]], dtype=torch.int32), topk=4)


def entries() -> dict:
    kc = mustafar_format.compress(randn(1, 1, 64, 64, seed=2), 0.5, kind="key")
    vc = mustafar_format.compress(randn(1, 1, 64, 64, seed=3), 0.5, kind="value")
    lse_on = dict(return_lse=True)
    return {e.name: e for e in [
        Entry(prefill, dict(q=randn(1, 2, 5, 16), k=randn(1, 1, 5, 16, seed=1), v=randn(1, 1, 5, 16, seed=2)),
              dict(causal=True, **lse_on), (1, 2, 5, 16), (1, 2, 5)),
        Entry(prefill_padded, dict(q=randn(2, 2, 5, 16), k=randn(2, 1, 5, 16, seed=1), v=randn(2, 1, 5, 16, seed=2),
                                   lengths=i32(5, 3)),
              dict(causal=False, **lse_on), (2, 2, 5, 16), (2, 2, 5)),
        Entry(prefill_packed, dict(q=randn(6, 2, 16), k=randn(6, 1, 16, seed=1), v=randn(6, 1, 16, seed=2),
                                   cu_seqlens=i32(0, 4, 6, 6)),
              dict(causal=True, max_seqlen=4, **lse_on), (6, 2, 16), (6, 2)),
        Entry(decode, dict(q=randn(2, 2, 1, 16), k=randn(2, 1, 6, 16, seed=1), v=randn(2, 1, 6, 16, seed=2)),
              dict(num_splits=2, **lse_on), (2, 2, 1, 16), (2, 2, 1)),
        Entry(paged_decode, {**paged_args(), "kv_last_page_len": i32(2, 3, 0)},
              dict(num_splits=1, **lse_on), (3, 2, 16), (3, 2)),
        Entry(sparse_decode, dict(q=randn(3, 2, 1, 16), k=randn(3, 1, 6, 16, seed=1), v=randn(3, 1, 6, 16, seed=2),
                                  **sparse_lists()),
              dict(num_splits=1, **lse_on), (3, 2, 1, 16), (3, 2, 1)),
        Entry(sparse_paged_decode, {**paged_args(), **sparse_lists()},
              dict(kv_last_page_len=i32(2, 3, 0), num_splits=1, **lse_on), (3, 2, 16), (3, 2)),
        Entry(magicpig_decode, {**paged_args(), **sparse_lists(), "K": torch.full((3, 2), 4.0),
                                "L": torch.full((3, 2), 20.0)},
              dict(kv_last_page_len=i32(2, 3, 0), num_splits=1, **lse_on), (3, 2, 16), (3, 2)),
        Entry(block_sparse, dict(q=randn(1, 1, 128, 16), k=randn(1, 1, 128, 16, seed=1),
                                 v=randn(1, 1, 128, 16, seed=2), sabi=i32(0).view(1, 1, 1, 1)),
              dict(block_shape=(128, 128), **lse_on), (1, 1, 128, 16), (1, 1, 128)),
        Entry(mustafar_keys, dict(q=randn(1, 2, 64, seed=4), kc=kc), {}, (1, 2, 64), out_dtype=torch.float32),
        Entry(mustafar_values, dict(p=randn(1, 2, 64, dtype=torch.float32, seed=5), vc=vc), {}, (1, 2, 64),
              out_dtype=torch.float32),
        Entry(mustafar_decode, dict(q=randn(1, 2, 64, seed=4), kc=kc, vc=vc), {}, (1, 2, 64)),
        Entry(mla_paged_decode, mla_args(), dict(num_splits=1, **lse_on), (3, 2, 16), (3, 2)),
        Entry(mla_paged_prefill, mla_args(prefill=True), dict(causal=True, num_splits=1, **lse_on),
              (3, 2, 16), (3, 2)),
        Entry(dsa_sparse_attention, dict(q_nope=randn(2, 2, 16), q_pe=randn(2, 2, 16, seed=1),
                                         ckv_cache=randn(4, 4, 16, seed=2), kpe_cache=randn(4, 4, 16, seed=3),
                                         sparse_indices=torch.tensor([[0, 5, -1], [15, -1, 7]], dtype=torch.int32)),
              dict(num_splits=1, **lse_on), (2, 2, 16), (2, 2)),
        Entry(dsa_topk_indexer, dsa_indexer_args(),
              dict(k_scale=torch.rand((3, 4), generator=torch.Generator().manual_seed(4)) + 0.5, return_logits=True),
              (2, 4), (2, 8), out_dtype=torch.int32, second="logits"),
    ]}


ENTRIES = entries()
#: The public entry points of each registered family (the registry's default implementation,
#: or the functions it dispatches to). A family added to the registry belongs here.
FAMILY_ENTRIES = {
    "prefill": ["prefill"], "prefill_varlen": ["prefill_padded", "prefill_packed"],
    "decode": ["decode"], "paged_decode": ["paged_decode"], "sparse_decode": ["sparse_decode"],
    "sparse_paged_decode": ["sparse_paged_decode"], "magicpig_decode": ["magicpig_decode"],
    "block_sparse": ["block_sparse"], "mustafar": ["mustafar_keys", "mustafar_values", "mustafar_decode"],
    "mla_paged_decode": ["mla_paged_decode"], "mla_paged_prefill": ["mla_paged_prefill"],
    "dsa_sparse_attention": ["dsa_sparse_attention"], "dsa_topk_indexer": ["dsa_topk_indexer"],
}
WITH_SCALE = [n for n in ENTRIES if n not in ("mustafar_keys", "mustafar_values", "dsa_topk_indexer")]
#: Entries with per-tensor dequantisation scales (floats): k_scale is folded into the score scale.
WITH_CACHE_SCALES = ["mla_paged_decode", "mla_paged_prefill", "dsa_sparse_attention"]


def test_every_family_is_covered():
    assert set(FAMILY_ENTRIES) == set(registry.names()) - {"probes"}
    assert sorted(n for names in FAMILY_ENTRIES.values() for n in names) == sorted(ENTRIES)


def test_uncached_entries_keep_no_call_cache(launches):
    """An entry marked ``cached=False`` is tried cold only: that is sound only while its module
    keeps no call cache and its calls look none up (a cache added later must flip the mark)."""
    for name, entry in ENTRIES.items():
        module = importlib.import_module(entry.fn.__module__)
        has_cache = any(isinstance(v, kernels._callcache.CallCache) for v in vars(module).values())
        HITS.clear()
        entry.call()
        entry.call()
        assert has_cache == entry.cached and bool(HITS) == entry.cached, (name, has_cache, HITS)


# ----------------------------------------------------------------------------- harness

@pytest.fixture
def launches(monkeypatch):
    """Launches are recorded, not run (the call cache binds them as it binds real ones), and every
    call cache starts empty: a first call is cold. ``HITS`` records, per cache lookup, whether it
    found a validated key (the lean path)."""
    seen = []
    lookup = kernels._callcache.CallCache.lookup

    def recording_lookup(self, key):
        found = lookup(self, key)
        HITS.append(found is not None)
        return found

    monkeypatch.setattr(kernels._callcache.CallCache, "lookup", recording_lookup)

    def record(plan):
        seen.append(plan)
        return [None] * len(list(plan.chain()))

    monkeypatch.setattr(kernels._checks, "launch", record)
    for name in KERNEL_MODULES:
        module = importlib.import_module(name)
        if hasattr(module, "launch"):
            monkeypatch.setattr(module, "launch", record)
    for cache in call_caches():
        cache.clear()
    yield seen
    for cache in call_caches():
        cache.clear()


def call_caches() -> list:
    found = []
    for name in KERNEL_MODULES:
        module = importlib.import_module(name)
        found += [v for v in vars(module).values() if isinstance(v, kernels._callcache.CallCache)]
    return found


HITS: list = []

#: Validation runs before a wrapper picks its kernel; the classes whose checks sit beside the
#: planning (data checks, the lean path's alias check) are tried on both paths.
PATHS = pytest.mark.parametrize("path", ["portable", "fast"], indirect=True)


@pytest.fixture
def path(request):
    with kernels.settings.using(kernel_path=request.param):
        yield request.param


def warm(entry: Entry, launches: list, **change) -> None:
    """A correct call, cached: the bad call after it takes the lean path."""
    entry.call(**change)
    assert launches, f"{entry.name}: the correct call did not reach the launch"
    assert any(c.entries for c in call_caches()), f"{entry.name}: the correct call was not cached"
    launches.clear()


def rejected(entry: Entry, launches: list, argument: str, exc=(ValueError, TypeError), *,
             lean: bool = None, **change) -> str:
    """Calls with ``change``; asserts the error names ``argument`` and nothing was launched, and
    with ``lean`` given, that the call did (True) or did not (False) take the lean path."""
    HITS.clear()
    with pytest.raises(exc) as info:
        entry.call(**change)
    if lean is not None:
        assert any(HITS) == lean, (entry.name, HITS)
    message = str(info.value)
    assert message.startswith(f"{entry.name}: "), message
    assert re.search(rf"(^|\W){re.escape(argument)}(\W|$)", message), (argument, message)
    assert not launches, f"{entry.name}: a kernel was launched for bad input ({message})"
    return message


MODES = ("cold", "cached")


def each_mode(entry: Entry, launches: list, check: Callable, **warm_change) -> None:
    """``check(mode)`` cold (empty caches), then after a correct call with ``warm_change``; after
    the refused call the correct one still takes the lean path (nothing was left poisoned). An
    entry without a call cache has the cold mode only."""
    for mode in MODES if entry.cached else MODES[:1]:
        for cache in call_caches():
            cache.clear()
        launches.clear()
        if mode == "cached":
            warm(entry, launches, **warm_change)
        check(mode)
        if mode == "cached":
            HITS.clear()
            entry.call(**warm_change)
            assert any(HITS) and launches, f"{entry.name}: the correct call after a refused one"


# ----------------------------------------------------------------------------- softmax scale

#: Finite doubles the kernels cannot use: not a float32 at all, or not once multiplied by log2(e).
BAD_SCALES = (1e39, -1e39, 3e38, 2.4e38, -2.4e38)
#: Legal: zero and negative scales, the largest magnitudes that fit, an int.
GOOD_SCALES = (0.0, -0.5, 2.3e38, -2.3e38, 1)


@pytest.mark.parametrize("name", WITH_SCALE)
def test_a_scale_that_float32_cannot_hold_is_refused(launches, name):
    entry = ENTRIES[name]
    for scale in BAD_SCALES:
        def check(mode):
            message = rejected(entry, launches, "scale", lean=False, scale=scale)
            assert "scale must be finite" in message, (scale, mode, message)
        each_mode(entry, launches, check, scale=1.0)


@PATHS
@pytest.mark.parametrize("name", WITH_SCALE)
def test_legal_scales_reach_the_launch(launches, name, path):
    for scale in GOOD_SCALES:
        ENTRIES[name].call(scale=scale)
        assert launches, (name, scale)
        launches.clear()


#: Per-tensor dequantisation scales: real numbers (not None, a bool or a string), > 0 and finite
#: in float32, and k_scale times the softmax scale, folded into one float32 with log2(e), must
#: stay finite too.
BAD_CACHE_SCALES = [(dict(k_scale=s), "k_scale") for s in (*BAD_SCALES[:3], 0.0, -0.5, None, True, "1.0")]
BAD_CACHE_SCALES += [(dict(v_scale=s), "v_scale") for s in (*BAD_SCALES[:3], 0.0, -0.5, None, True, "1.0")]
BAD_CACHE_SCALES += [(dict(scale=1e30, k_scale=1e10), "k_scale"), (dict(scale=-2e38, k_scale=1.5), "k_scale")]


@pytest.mark.parametrize("name", WITH_CACHE_SCALES)
def test_a_cache_scale_the_kernel_cannot_use_is_refused(launches, name):
    entry = ENTRIES[name]
    for change, argument in BAD_CACHE_SCALES:
        def check(mode):
            exc = ValueError if isinstance(change[argument], float) else TypeError
            rejected(entry, launches, argument, exc=exc, lean=False, **change)
        each_mode(entry, launches, check)


@pytest.mark.parametrize("name", WITH_CACHE_SCALES)
def test_legal_cache_scales_reach_the_launch(launches, name):
    for change in (dict(k_scale=1 / 64, v_scale=8.0), dict(k_scale=2, v_scale=1),
                   dict(scale=1e30, k_scale=1e-8), dict(scale=-1.0, k_scale=2.3e38, v_scale=2.3e38)):
        ENTRIES[name].call(**change)
        assert launches, (name, change)
        launches.clear()


# ----------------------------------------------------------------------------- meta tensors

@pytest.mark.parametrize("name", list(ENTRIES))
def test_a_meta_tensor_is_named(launches, name):
    entry = ENTRIES[name]
    outputs = entry.outputs()
    for arg in [*entry.tensors(), *outputs]:
        if arg in outputs:
            change = {**outputs, arg: outputs[arg].to(META)}
        else:
            change = {**outputs, **entry.with_tensor(arg, entry.tensors()[arg].to(META))}

        def check(mode):
            message = rejected(entry, launches, arg, lean=False, **change)
            assert "is on the meta device, which holds no data" in message, (arg, mode, message)
        each_mode(entry, launches, check, **outputs)


def test_the_compressor_names_a_meta_tensor():
    with pytest.raises(ValueError, match="compress: x is on the meta device, which holds no data"):
        mustafar_format.compress(torch.zeros(1, 1, 64, 64, dtype=torch.float16, device=META), 0.5, kind="key")


# ----------------------------------------------------------------------------- aliased outputs

def second_storages(first: torch.Tensor, second_shape: tuple, second_dtype: torch.dtype,
                    overlap: bool = True) -> tuple:
    """A copy of ``first`` and a new tensor of ``second_shape``, each a storage of its own (two
    ``torch.from_numpy`` calls) over one numpy buffer: overlapping (the smaller starts 16 bytes
    into the larger where it fits) or side by side. 16-byte offsets keep both as aligned as a
    fresh allocation (the call cache keys on alignment)."""
    n1 = first.numel() * first.element_size()
    n2 = math.prod(second_shape) * torch.empty(0, dtype=second_dtype).element_size()
    buf = np.zeros(n1 + n2 + 64, dtype=np.uint8)
    at1, at2 = 0, -(-n1 // 16) * 16
    if overlap:
        shift = 16 if max(n1, n2) >= min(n1, n2) + 16 else 0
        at1, at2 = (shift, 0) if n1 <= n2 else (0, shift)
    a = torch.from_numpy(buf[at1:at1 + n1]).view(first.dtype).view(first.shape)
    a.copy_(first)
    b = torch.from_numpy(buf[at2:at2 + n2]).view(second_dtype).view(second_shape)
    return a, b


@PATHS
@pytest.mark.parametrize("name", list(ENTRIES))
def test_an_output_over_an_input_s_memory_is_refused(launches, name, path):
    entry = ENTRIES[name]
    outputs = entry.outputs()
    pairs = [(output, arg) for output in outputs for arg in entry.tensors()]
    second = entry.second
    pairs += [(second, "out")] if second in outputs else []
    for output, arg in pairs:
        if arg == "out":  # lse (logits) over out's memory
            out, lse = second_storages(outputs["out"], tuple(outputs[second].shape), torch.float32)
            base, bad = {"out": out, second: outputs[second]}, {"out": out, second: lse}
        else:
            source, buffer = second_storages(entry.tensors()[arg], tuple(outputs[output].shape),
                                             outputs[output].dtype)
            base = {**outputs, **entry.with_tensor(arg, source)}
            bad = {**base, output: buffer}

        def check(mode):
            message = rejected(entry, launches, output, lean=mode == "cached", **bad)
            assert f"{output} must not share memory with {arg}" in message, (mode, message)
        each_mode(entry, launches, check, **base)


@PATHS
@pytest.mark.parametrize("name", list(ENTRIES))
def test_outputs_beside_an_input_in_one_buffer_are_accepted(launches, name, path):
    entry = ENTRIES[name]
    outputs = entry.outputs()
    first = next(iter(entry.tensors()))
    source, out = second_storages(entry.tensors()[first], tuple(outputs["out"].shape),
                                  outputs["out"].dtype, overlap=False)
    entry.call(**{**outputs, **entry.with_tensor(first, source), "out": out})
    assert launches


# ----------------------------------------------------------------------------- argument types

#: entry -> [(argument, the correct value, an equal value of the wrong type)].
TYPE_SWAPS = {name: [] for name in ENTRIES}
for _n, _e in ENTRIES.items():
    for _flag in ("return_lse", "causal", "return_logits"):
        if _flag in _e.kwargs:
            TYPE_SWAPS[_n].append((_flag, _e.kwargs[_flag], int(_e.kwargs[_flag])))
    if _n not in ("prefill", "decode"):
        TYPE_SWAPS[_n].append(("check_indices", True, 1))
    if "num_splits" in _e.kwargs:
        TYPE_SWAPS[_n].append(("num_splits", _e.kwargs["num_splits"], float(_e.kwargs["num_splits"])))
TYPE_SWAPS["prefill_packed"].append(("max_seqlen", 4, 4.0))
TYPE_SWAPS["block_sparse"] += [("block_shape", (128, 128), (128.0, 128)),
                               ("block_shape", (128, 128), [128, 128.0])]
TYPE_SWAPS["paged_decode"].append(("layout", "HND", b"HND"))
TYPE_SWAPS["dsa_topk_indexer"].append(("topk", 4, 4.0))
#: A compressed cache's fields: entry -> [(cache, field, an equal value of the wrong type)].
CACHE_SWAPS = {n: [(c, field, bad) for c in caches
                   for field, bad in (("bits", 16.0), ("shape", (1, 1, 64.0, 64)), ("shape", [1, 1, 64, 64.0]))]
               for n, caches in (("mustafar_keys", ("kc",)), ("mustafar_values", ("vc",)),
                                 ("mustafar_decode", ("kc", "vc")))}


@pytest.mark.parametrize("name", list(ENTRIES))
def test_an_equal_value_of_the_wrong_type_is_refused(launches, name):
    entry = ENTRIES[name]
    assert TYPE_SWAPS[name] or name == "mustafar_decode"
    for arg, good, bad in TYPE_SWAPS[name]:
        def check(mode):
            rejected(entry, launches, arg, exc=TypeError, lean=False, **{arg: bad})
        each_mode(entry, launches, check, **{arg: good})
    for cache, field, bad in CACHE_SWAPS.get(name, ()):
        changed = dataclasses.replace(entry.args[cache], **{field: bad})

        def check(mode):
            rejected(entry, launches, f"{cache}.{field}", exc=TypeError, lean=False, **{cache: changed})
        each_mode(entry, launches, check)


# ----------------------------------------------------------------------------- index overflow

PAGED = ("paged_decode", "sparse_paged_decode", "magicpig_decode", "mla_paged_decode", "mla_paged_prefill")
SPARSE = ("sparse_decode", "sparse_paged_decode", "magicpig_decode")


def offsets_near_the_top(c: mustafar_format.Compressed) -> mustafar_format.Compressed:
    offsets = c.offsets.clone()
    offsets[1:] = BIG
    return dataclasses.replace(c, offsets=offsets)


def overflows(name: str) -> list:
    """(change, argument) for ``name``: index values whose int32 arithmetic overflows, in tensors
    of the valid call's shapes (so the cached mode reaches the data checks on the lean path)."""
    out = []
    if name in PAGED:
        # Three sequences of 2**31 - 1, 2**31 - 1 and 5 pages: the int32 differences of this
        # table wrap to exactly those counts and it ends at len(indices) = 3, so it looks ordered
        # in int32 (and every other check of the table passes).
        out += [(dict(kv_page_indptr=i32(0, BIG, -2, 3), kv_last_page_len=i32(1, 1, 1)), "kv_page_indptr"),
                (dict(kv_page_indptr=i32(0, BIG, BIG, 3)), "kv_page_indptr"),
                (dict(kv_page_indices=i32(3, BIG, 0)), "kv_page_indices"),
                (dict(kv_last_page_len=i32(2, BIG, 0)), "kv_last_page_len")]
    if name in SPARSE:
        out += [(dict(sparse_ind=torch.full((3, 2, 3), BIG, dtype=torch.int32)), "sparse_ind"),
                (dict(sparse_nnz=torch.full((3, 2), BIG, dtype=torch.int32)), "sparse_nnz")]
    if name == "mla_paged_prefill":
        # Sequences of 2**31 - 1, 2**31 - 1 and 5 queries: wraps to T = 3 in int32 (non-causal:
        # a causal call also needs n <= m, which these counts fail in int32 as well).
        out += [(dict(qo_indptr=i32(0, BIG, -2, 3), causal=False), "qo_indptr"),
                (dict(qo_indptr=i32(0, BIG, BIG, 3), causal=False), "qo_indptr"),
                (dict(qo_indptr=i32(0, BIG, -2, 3)), "qo_indptr")]
    if name == "dsa_sparse_attention":
        out += [(dict(sparse_indices=torch.full((2, 3), BIG, dtype=torch.int32)), "sparse_indices")]
    if name == "dsa_topk_indexer":
        out += [(dict(seq_lens=i32(BIG, 3)), "seq_lens"),
                (dict(block_table=torch.tensor([[2, BIG], [1, 0]], dtype=torch.int32)), "block_table")]
    if name == "prefill_packed":
        # Sequences of 2**31 - 1, 2**31 - 4 and 11 tokens, wrapping to T = 6 in int32.
        out += [(dict(cu_seqlens=i32(0, BIG, -5, 6)), "cu_seqlens"),
                (dict(cu_seqlens=i32(0, BIG, 6, 6)), "cu_seqlens")]
    if name == "prefill_padded":
        out += [(dict(lengths=i32(BIG, 3)), "lengths")]
    if name == "block_sparse":
        out += [(dict(sabi=i32(BIG).view(1, 1, 1, 1)), "sabi")]
    for cache in ("kc", "vc"):
        if cache in ENTRIES[name].args:
            out += [({cache: offsets_near_the_top(ENTRIES[name].args[cache])}, f"{cache}.offsets")]
    return out


@PATHS
@pytest.mark.parametrize("name", [n for n in ENTRIES if overflows(n)])
def test_index_values_that_overflow_int32_are_refused(launches, name, path):
    entry = ENTRIES[name]
    for change, argument in overflows(name):
        def check(mode):
            rejected(entry, launches, argument, exc=ValueError, lean=mode == "cached", **change)
        # A scalar the change sets (causal=False) is part of the call's key: warm with it.
        each_mode(entry, launches, check, **{k: v for k, v in change.items() if isinstance(v, (bool, int, float, str))})


def test_entries_without_index_arrays_have_no_overflow_case():
    assert {n for n in ENTRIES if not overflows(n)} == {"prefill", "decode"}


@PATHS
@pytest.mark.parametrize("name", PAGED)
def test_a_sequence_longer_than_int32_positions_is_refused(launches, name, path):
    """2**15 pages of 2**16 slots: 2**31 tokens, one more than an int32 position reaches. The
    table is otherwise valid (every entry is page 0 of a one-page pool)."""
    pages, page = 2**15, 2**16
    if name.startswith("mla"):
        cache = dict(ckv_cache=torch.zeros(1, page, 16, dtype=torch.float16),
                     kpe_cache=torch.zeros(1, page, 16, dtype=torch.float16))
    else:
        cache = dict(kv_cache=torch.zeros(1, 2, 1, page, 16, dtype=torch.float16))
    change = dict(**cache, kv_page_indptr=i32(0, pages, pages, pages),
                  kv_page_indices=torch.zeros(pages, dtype=torch.int32),
                  kv_last_page_len=i32(page, 0, 0))
    message = rejected(ENTRIES[name], launches, "kv_page_indptr", exc=ValueError, **change)
    assert "int32" in message


def test_indexer_positions_past_int32_are_refused(launches):
    """2**16 pages of 2**15 slots in the table's width: 2**31 logical positions, one more than the
    indexer's int32 positions reach (the pool itself is one page)."""
    pages, page = 2**16, 2**15
    change = dict(k_cache=torch.zeros(1, page, 16, dtype=torch.float8_e4m3fn),
                  k_scale=torch.ones(1, page), block_table=torch.zeros(2, pages, dtype=torch.int32),
                  return_logits=False)
    message = rejected(ENTRIES["dsa_topk_indexer"], launches, "block_table", exc=ValueError, **change)
    assert "int32" in message


def test_a_slice_whose_rows_pass_int32_offsets_is_refused_by_shape():
    """Decode steps along S with int32 row offsets (batch and head offsets are int64): K/V whose
    rows of one head reach past 2**31 - 1 elements are refused from their shape and strides (a
    meta tensor: nothing is allocated); one element less passes."""
    too_far = torch.empty_strided((1, 1, 2**16 + 1, 16), (0, 0, 2**15, 1), dtype=torch.float16, device=META)
    with pytest.raises(ValueError, match=r"^decode: k rows reach element 2147483663 .*int32"):
        kernels._checks.check_rows_fit_int32("decode", "k", too_far, 2)
    fits = torch.empty_strided((1, 1, 2**16, 2**15), (0, 0, 2**15, 1), dtype=torch.float16, device=META)
    kernels._checks.check_rows_fit_int32("decode", "k", fits, 2)


#: Where a portable kernel steps along S with int32 row offsets: entry -> (module, the tensors
#: checked). prefill and block_sparse check in their portable plans (their fast paths use int64).
ROW_REACH = {"decode": ("kernels.decode", ["k", "v"]),
             "prefill": ("kernels.prefill", ["q", "k", "v", "out"]),
             "block_sparse": ("kernels.block_sparse", ["q", "out"])}


@pytest.mark.parametrize("name", list(ROW_REACH))
def test_portable_kernels_check_the_row_reach_of_their_tensors(launches, monkeypatch, name):
    module_name, names = ROW_REACH[name]
    module = importlib.import_module(module_name)
    seen, real = [], module.check_rows_fit_int32

    def spy(fn, arg, t, dim):
        seen.append((fn, arg, dim))
        real(fn, arg, t, dim)

    monkeypatch.setattr(module, "check_rows_fit_int32", spy)
    with kernels.settings.using(kernel_path="portable"):
        ENTRIES[name].call()
    assert seen == [(name, arg, 2) for arg in names]


def test_index_checks_still_pass_tables_that_fit(launches):
    """The largest legal page ids and positions pass (the checks above are not too strict)."""
    ENTRIES["sparse_paged_decode"].call(kv_page_indices=i32(4, 4, 4),
                                        sparse_ind=torch.full((3, 2, 3), 2, dtype=torch.int32))
    assert launches


# ----------------------------------------------------------------------------- real runs

@interpreted
@pytest.mark.parametrize("name", list(ENTRIES))
def test_a_run_with_a_negative_scale_writes_only_its_outputs(name):
    """A legal call at the scale class's edge runs, writes every output element and nothing
    around out/lse (the harness's guarded NaN buffers)."""
    entry = ENTRIES[name]
    views, storages = {}, {}
    for n, t in entry.outputs().items():
        views[n], storages[n] = guarded_nan_buffer(tuple(t.shape), t.dtype, "cpu")
    entry.call(**views, **({"scale": -0.5} if name in WITH_SCALE else {}))
    for n in views:
        assert guards_intact(storages[n]), (name, n)
        assert not (views[n] != views[n]).any() if views[n].is_floating_point() \
            else not (views[n] == poison(views[n].dtype)).any(), (name, n)
