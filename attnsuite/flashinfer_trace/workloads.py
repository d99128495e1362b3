"""FlashInfer-Trace Definition and Workload files -> cases of our families (``--workloads DIR``).

DIR is a FlashInfer-Trace dataset (or any folder of its files): every ``*.json`` under it that is a
Definition, every ``*.jsonl`` line that is a workload entry (a Trace with ``solution`` and
``evaluation`` null, as ``workloads/<op_type>/<definition>.jsonl`` holds them; a bare Workload
object is read too, its definition named by the file's stem). Lines that carry an evaluation
are results, not workloads, and are passed over.

Mapping (schema: docs/op-types/gqa-{paged,ragged}.mdx):

- ``gqa_paged`` decode (no ``qo_indptr`` input) -> ``paged_decode``, layout NHD (their
  ``k_cache``/``v_cache [num_pages, page_size, num_kv_heads, head_dim]`` are our NHD cache's two
  halves). The page table is the workload's (``kv_indptr``, ``kv_indices``,
  ``kv_last_page_len`` from safetensors) when it stores one, else drawn from the axes
  deterministically (seeded by the workload uuid): ``num_kv_indices`` pages split over
  ``batch_size`` sequences, scattered in a pool of ``num_pages``. A definition without a
  ``kv_last_page_len`` input means full last pages (its reference reads whole pages).
- ``gqa_ragged`` prefill -> ``prefill_varlen``, packed layout, causal when the definition's
  name says so (their naming rule, ``gqa_ragged_prefill_causal_...``). Our family takes one
  length per sequence for q and kv, so a workload whose q and kv lengths differ is not mapped.
- ``dsa_paged`` indexer / sparse_attention -> ``dsa_topk_indexer`` / ``dsa_sparse_attention``
  (attnsuite/flashinfer_trace/dsa.py).
- ``gqa_paged`` prefill -> not mapped: no family of ours runs a query block over a paged cache.
  Gathering the pages into a ragged case would drop the paging the workload is about.

``sm_scale`` (a scalar input of the workload) becomes the case's ``scale``; absent, the case
passes None (1/sqrt(D), FlashInfer's default too). q/k/v values are the family's own seeded
draws: a workload's tensor data (random or safetensors) is never read, only its shapes and page
tables. Their LSE is base 2, ours natural: the reference judges ours; traces say so.

A workload that cannot be mapped still becomes a case, one that skips with the reason, so the
run shows it. Case ids: ``<family>[fi-<definition>-<uuid>]``, tagged ``workload``.
"""
from __future__ import annotations

import functools
import hashlib
import json
import random
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..case import Case
from . import dsa, schema
from .safetensors_index import SafetensorsError, read_tensor

TAG = "workload"
#: What this module maps, by op_type; other op types are listed as ignored.
OP_TYPES = ("gqa_paged", "gqa_ragged", "mla_paged", "dsa_paged")
DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


class Unmapped(Exception):
    """A workload this suite cannot run as a case of its families (the message says why)."""


@dataclass
class Loaded:
    """What DIR held: cases by family, and what was passed over (for the run's header)."""
    cases: dict[str, list[Case]] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        n = sum(len(v) for v in self.cases.values())
        skipped = sum(1 for v in self.cases.values() for c in v if c.params.get("unmapped"))
        text = f"workloads: {n} cases ({skipped} not mapped, skipped with the reason)"
        if self.ignored:
            text += f"; op types not read: {', '.join(sorted(set(self.ignored)))}"
        if self.problems:
            text += f"; {len(self.problems)} unreadable entries, first: {self.problems[0]}"
        return text


def read_definitions(root: Path, problems: list[str]) -> dict[str, tuple[dict, Path]]:
    found: dict[str, tuple[dict, Path]] = {}
    for path in sorted(root.rglob("*.json")):
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: {exc}")
            continue
        if not isinstance(d, dict) or "op_type" not in d:
            continue  # some other JSON file (a Solution, a config)
        bad = schema.validate_definition(d)
        if bad:
            problems.append(f"{path}: {bad[0]}")
        elif d["name"] in found:
            problems.append(f"{path}: definition {d['name']!r} also in {found[d['name']][1]}")
        else:
            found[d["name"]] = (d, path)
    return found


def read_workload_entries(root: Path, problems: list[str]) -> list[tuple[str, dict]]:
    """(definition name, workload) for every workload entry under ``root``, in file order."""
    entries = []
    for path in sorted(root.rglob("*.jsonl")):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            problems.append(f"{path}: {exc}")
            continue
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                problems.append(f"{path}:{i}: {exc}")
                continue
            if isinstance(obj, dict) and "workload" in obj:
                if obj.get("evaluation") is not None or obj.get("solution") is not None:
                    continue  # a result (Trace), not a workload entry
                name, workload = obj.get("definition"), obj["workload"]
            else:
                name, workload = path.stem, obj
            bad = schema.validate_workload(workload)
            if bad:
                problems.append(f"{path}:{i}: {bad[0]}")
                continue
            entries.append((name, workload))
    return entries


@functools.lru_cache(maxsize=None)
def load(root: str) -> Loaded:
    """Every workload under ``root`` as cases (read once per process)."""
    base = Path(root)
    loaded = Loaded()
    if not base.is_dir():
        loaded.problems.append(f"--workloads {root}: not a directory")
        return loaded
    definitions = read_definitions(base, loaded.problems)
    for name, workload in read_workload_entries(base, loaded.problems):
        if name not in definitions:
            loaded.problems.append(f"workload {workload['uuid']}: no definition named {name!r} under {root}")
            continue
        definition, path = definitions[name]
        if definition["op_type"] not in OP_TYPES:
            loaded.ignored.append(definition["op_type"])
            continue
        family, case = to_case(definition, workload, base, path)
        loaded.cases.setdefault(family, []).append(case)
    return loaded


def to_case(definition: dict, workload: dict, root: Path, definition_path: Path | None = None) -> tuple[str, Case]:
    """(family name, case) for one workload of ``definition``; an unmapped one skips."""
    family = target_family(definition)
    meta = {"definition": definition["name"], "op_type": definition["op_type"], "workload": workload,
            "definition_file": str(definition_path) if definition_path else None}
    label = f"fi-{_safe(definition['name'])}-{_safe(workload['uuid'])}"
    try:
        if family.startswith("mla_"):  # mla_paged: attnsuite/flashinfer_trace/mla.py, given these helpers
            from .mla import params as mla_params
            params = mla_params(definition, workload, root, sys.modules[__name__])
        elif definition["op_type"] == dsa.OP_TYPE:  # DeepSeek sparse attention: flashinfer_trace/dsa.py
            params = dsa_params(definition, workload, root)
        else:
            params = (paged_decode_params if family == "paged_decode" else ragged_prefill_params)(
                definition, workload, root)
    except Unmapped as exc:
        query = definition["inputs"].get("q") or definition["inputs"].get("q_nope") or {}
        params = {"dtype": DTYPES.get(query.get("dtype"), "fp16"), "unmapped": str(exc)}
    params["fi"] = meta
    return family, Case(family, label, params, TAG, frozenset({TAG}))


def target_family(definition: dict) -> str:
    if definition["op_type"] == "mla_paged":
        from .mla import target_family as mla_family
        return mla_family(definition)
    if definition["op_type"] == dsa.OP_TYPE:
        return dsa.family(definition)
    if definition["op_type"] == "gqa_paged" and "qo_indptr" not in definition["inputs"]:
        return "paged_decode"
    return "prefill_varlen"  # gqa_ragged prefill, and gqa_paged prefill (the closest; unmapped)


def unmapped_reason(case: Case) -> str | None:
    reason = case.params.get("unmapped")
    return f"FlashInfer-Trace workload not mapped: {reason}" if reason else None


# -- per op type ----------------------------------------------------------------------------------

def paged_decode_params(definition: dict, workload: dict, root: Path) -> dict:
    axes = axis_values(definition, workload)
    Hq, Hkv, D, P = (_axis(axes, n) for n in ("num_qo_heads", "num_kv_heads", "head_dim", "page_size"))
    dtype = case_dtype(definition, ("q", "k_cache", "v_cache"))
    _check_heads(Hq, Hkv)
    if P < 1:
        raise Unmapped(f"page_size {P}")
    rng = _rng(workload)
    has_last = "kv_last_page_len" in definition["inputs"]
    indptr = _given(workload, "kv_indptr", root)
    indices = _given(workload, "kv_indices", root)
    last = _given(workload, "kv_last_page_len", root) if has_last else None
    if (indptr is None) != (indices is None):
        raise Unmapped("only one of kv_indptr / kv_indices is stored; a page table needs both")
    if indptr is not None:
        B = len(indptr) - 1
        counts = [indptr[b + 1] - indptr[b] for b in range(B)]
        if B < 1 or indptr[0] != 0 or min(counts, default=0) < 0 or indptr[-1] != len(indices):
            raise Unmapped(f"kv_indptr {indptr[:8]}... is no CSR offset array over {len(indices)} kv_indices")
        num_pages = axes.get("num_pages", max(indices, default=-1) + 1)
        if any(not 0 <= i < num_pages for i in indices):
            raise Unmapped(f"kv_indices outside [0, num_pages={num_pages})")
        placement, pages, pool = "given", tuple(indices), max(num_pages, 1)
    else:
        B = axes["batch_size"] if "batch_size" in axes else _axis(axes, "len_indptr") - 1
        total = _axis(axes, "num_kv_indices")
        counts = split(rng, total, B, minimum=1 if total >= B else 0)
        num_pages = axes.get("num_pages", total)
        placement, pages = ("scattered", None) if num_pages >= total else ("shuffled", None)
        pool = max(num_pages, 1) if placement == "scattered" else None
    if last is None:
        last = [(rng.randint(1, P) if has_last else P) if c else 0 for c in counts]
    elif len(last) != len(counts):
        raise Unmapped(f"kv_last_page_len has {len(last)} entries for {len(counts)} sequences")
    if any(c and not 1 <= n <= P for c, n in zip(counts, last)):
        raise Unmapped(f"kv_last_page_len outside 1..page_size={P} for a sequence with pages")
    lengths = tuple(P * (c - 1) + n if c else 0 for c, n in zip(counts, last))
    return dict(dtype=dtype, layout="NHD", P=P, placement=placement, lengths=lengths, Hq=Hq, Hkv=Hkv, D=D,
                lse="lse" in definition["outputs"], vs=None, pool=pool, view="contig", vals="randn",
                scale=sm_scale(workload), pages=pages)


def dsa_params(definition: dict, workload: dict, root: Path) -> dict:
    axes = axis_values(definition, workload)
    axis = functools.partial(_axis, axes)
    try:
        if dsa.family(definition) == "dsa_topk_indexer":
            return dsa.indexer_params(axis, _given(workload, "seq_lens", root),
                                      lambda total, parts: split(_rng(workload), total, parts, 1))
        return dsa.sparse_attention_params(axis, case_dtype(definition, ("q_nope", "q_pe", "ckv_cache", "kpe_cache")),
                                           sm_scale(workload), "lse" in definition["outputs"])
    except ValueError as exc:
        raise Unmapped(str(exc)) from None


def ragged_prefill_params(definition: dict, workload: dict, root: Path) -> dict:
    if definition["op_type"] == "gqa_paged":
        raise Unmapped("gqa_paged prefill: no family of this suite runs queries over a paged cache "
                       "(as prefill_varlen over gathered pages it would no longer test paging)")
    axes = axis_values(definition, workload)
    Hq, Hkv, D = (_axis(axes, n) for n in ("num_qo_heads", "num_kv_heads", "head_dim"))
    dtype = case_dtype(definition, ("q", "k", "v"))
    _check_heads(Hq, Hkv)
    qo, kv = _given(workload, "qo_indptr", root), _given(workload, "kv_indptr", root)
    if qo is not None and kv is not None:
        q_lens = [qo[i + 1] - qo[i] for i in range(len(qo) - 1)]
        kv_lens = [kv[i + 1] - kv[i] for i in range(len(kv) - 1)]
        if q_lens != kv_lens:
            raise Unmapped("q and kv lengths differ per sequence (prefix reuse); prefill_varlen takes one length "
                           "per sequence for both")
        lengths = q_lens
    elif qo is not None or kv is not None:
        raise Unmapped("only one of qo_indptr / kv_indptr is stored; the other is needed to pair the lengths")
    else:
        total_q, total_kv = _axis(axes, "total_q"), _axis(axes, "total_kv")
        if total_q != total_kv:
            raise Unmapped(f"total_q {total_q} != total_kv {total_kv}: prefill_varlen takes one length per sequence "
                           "for q and kv")
        B = _axis(axes, "len_indptr") - 1
        lengths = split(_rng(workload), total_q, B, minimum=1 if total_q >= B else 0)
    if any(n < 0 for n in lengths) or not lengths:
        raise Unmapped(f"sequence lengths {lengths[:8]} are not a batch")
    lengths = tuple(int(n) for n in lengths)
    return dict(dtype=dtype, layout="packed", lengths=lengths, S=max(max(lengths), 1), Hq=Hq, Hkv=Hkv, D=D,
                causal=is_causal(definition), lse="lse" in definition["outputs"], vs=None, view="contig",
                vals="randn", scale=sm_scale(workload))


# -- helpers --------------------------------------------------------------------------------------

def axis_values(definition: dict, workload: dict) -> dict[str, int]:
    values = {n: a["value"] for n, a in definition["axes"].items() if a.get("type") == "const"}
    values.update(workload["axes"])
    return values


def is_causal(definition: dict) -> bool:
    return "causal" in definition["name"].split("_") or "causal" in definition.get("tags", [])


def sm_scale(workload: dict) -> float | None:
    spec = workload["inputs"].get("sm_scale")
    if spec is None:
        return None
    if spec.get("type") != "scalar":
        raise Unmapped(f"sm_scale is a {spec.get('type')} input; only a scalar value can be a case's scale")
    return float(spec["value"])


def case_dtype(definition: dict, names) -> str:
    dtypes = {_dtype(definition, n) for n in names}
    if len(dtypes) != 1:
        raise Unmapped(f"inputs {names} have different dtypes {sorted(map(str, dtypes))}")
    dtype = dtypes.pop()
    if dtype not in DTYPES:
        raise Unmapped(f"dtype {dtype}: the families run {sorted(DTYPES)}")
    return DTYPES[dtype]


def split(rng: random.Random, total: int, parts: int, minimum: int) -> list[int]:
    """``total`` split into ``parts`` counts of at least ``minimum``, cut points drawn from ``rng``."""
    if parts < 1:
        raise Unmapped(f"batch of {parts} sequences")
    spare = total - minimum * parts
    cuts = sorted(rng.randint(0, spare) for _ in range(parts - 1))
    edges = [0, *cuts, spare]
    return [minimum + edges[i + 1] - edges[i] for i in range(parts)]


def _given(workload: dict, name: str, root: Path) -> list[int] | None:
    """An input's integers when the workload stores them (safetensors), else None."""
    spec = workload["inputs"].get(name)
    if spec is None or spec.get("type") != "safetensors":
        return None
    path = Path(spec["path"])
    try:
        tensor = read_tensor(path if path.is_absolute() else root / path, spec["tensor_key"])
    except SafetensorsError as exc:
        raise Unmapped(f"{name}: {exc}") from None
    if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
        raise Unmapped(f"{name}: stored as {str(tensor.dtype).replace('torch.', '')}, not integers")
    return [int(x) for x in tensor.reshape(-1).tolist()]


def _dtype(definition: dict, name: str) -> str | None:
    spec = definition["inputs"].get(name)
    if spec is None:
        raise Unmapped(f"definition has no input {name!r}")
    return spec.get("dtype")


def _axis(axes: dict, name: str) -> int:
    if name not in axes:
        raise Unmapped(f"no value for axis {name!r} (neither const in the definition nor in the workload)")
    return int(axes[name])


def _check_heads(Hq: int, Hkv: int) -> None:
    if Hkv < 1 or Hq % Hkv:
        raise Unmapped(f"num_qo_heads {Hq} is not a multiple of num_kv_heads {Hkv}")


def _rng(workload: dict) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(workload["uuid"].encode()).digest()[:8], "little"))


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)
