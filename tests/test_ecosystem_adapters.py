"""The ecosystem adapters (attnsuite/ecosystem/): registration, Unsupported reasons, a broken
library reported once, the layout / scale / LSE mapping checked by the suite's own runner and
references (torch SDPA and flex_attention run on CPU; vLLM, FlashInfer and FlagGems through
stand-ins written here from their documented semantics), and the adapter notes in the record."""
from __future__ import annotations

import dataclasses
import math
import types
import warnings

import pytest
import torch

from attnsuite import ecosystem
from attnsuite.devices.cpu import CpuDevice
from attnsuite.ecosystem import Library, LibraryUnusable, flag_gems, flashinfer, flex, staged, torch_sdpa, vllm
from attnsuite.ecosystem import library as ecosystem_library
from attnsuite.interfaces import Unsupported, check_impl
from attnsuite.records import build_record
from attnsuite.registry import families
from attnsuite.runner import run_case

FAMS = families()
SDPA = {"sdpa", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_math"}
EXPECTED = {
    "prefill": SDPA | {"flex", "flag_gems", "vllm", "flashinfer", "npu_fusion_attention"},
    "decode": SDPA | {"flex", "flag_gems", "vllm", "flashinfer", "npu_fused_infer"},
    "prefill_varlen": SDPA | {"flex", "flag_gems", "vllm", "flashinfer"},
    "paged_decode": SDPA | {"flex", "flag_gems", "vllm", "flashinfer", "npu_fused_infer"},
    "block_sparse": {"flex"},
    "mla_paged_decode": {"vllm", "flashinfer"},
    "mla_paged_prefill": {"flashinfer"},
}


def _quick(family: str, pick=lambda c: True, limit: int | None = None):
    cases = [c for c in FAMS[family].cases if c.profile == "quick" and pick(c)]
    return cases[:limit] if limit else cases


def _run(family: str, impl, cases):
    return {c.id: run_case(FAMS[family], c, CpuDevice(), impl) for c in cases}


def _assert_all_pass(outcomes):
    bad = {cid: (o.status, o.message[:300]) for cid, o in outcomes.items() if o.status != "pass"}
    assert outcomes and not bad, bad


# -- registration -------------------------------------------------------------------------------

@pytest.mark.parametrize("family", sorted(EXPECTED))
def test_each_family_registers_its_ecosystem_adapters_with_their_library(family):
    impls = FAMS[family].impls
    assert EXPECTED[family] <= set(impls)
    for name in EXPECTED[family]:
        fn = impls[name]
        assert isinstance(fn.library, Library) and fn.library.written_against
        assert callable(fn.prepare)  # the copy-free launch a timer can time alone
        check_impl(FAMS[family], name, fn)


def test_families_without_a_library_kernel_register_none():
    for family in ("sparse_decode", "sparse_paged_decode", "magicpig_decode", "mustafar"):
        assert set(FAMS[family].impls) == {"triton"}


def test_libraries_say_which_ran_on_a_gpu():
    libs = {lib.name: lib for lib in ecosystem.libraries()}
    assert {"torch SDPA", "torch flex_attention", "FlagGems", "vLLM", "FlashInfer", "torch_npu"} == set(libs)
    # Flipped after a run on a lent GPU (docs/hardware-log.md); vLLM's and FlashInfer's wheels
    # were never on one, and torch_npu never on an NPU.
    ran = {name for name, lib in libs.items() if lib.gpu_tested}
    assert ran == {"torch SDPA", "torch flex_attention", "FlagGems"}


# -- torch backends that run on CPU: numbers through the suite's own runner ------------------------

def _interesting(c):
    """LSE, GQA and non-default scales: the mappings that can go wrong."""
    return c["lse"] and (c.params.get("scale") is not None or c.params.get("Hq", 1) != c.params.get("Hkv", 1))


@pytest.mark.parametrize("family", ["prefill", "decode", "prefill_varlen", "paged_decode"])
@pytest.mark.parametrize("impl", ["sdpa_flash", "flex"])
def test_torch_adapters_pass_lse_scale_and_gqa_cases_on_cpu(family, impl):
    _assert_all_pass(_run(family, FAMS[family].impls[impl], _quick(family, _interesting, limit=6)))


def test_flex_block_mask_follows_the_sabi_layout():
    cases = _quick("block_sparse", lambda c: c["lse"], limit=8)
    _assert_all_pass(_run("block_sparse", FAMS["block_sparse"].impls["flex"], cases))
    # A block mask that ignored the layout (everything attended) fails the same cases: the check bites.
    dense = staged(flex.LIBRARY, lambda q, k, v, sabi, *, block_shape, scale=None, return_lse=False, out=None,
                   lse=None: flex._block_sparse(q, k, v, torch.zeros_like(sabi[..., :1]).expand_as(sabi).contiguous()
                                                + torch.arange(sabi.shape[-1], dtype=sabi.dtype),
                                                block_shape=block_shape, scale=scale, return_lse=return_lse, out=out,
                                                lse=lse))
    sparse = [c for c in cases if c["s"] > 0]
    assert sparse and any(o.status == "fail" for o in _run("block_sparse", dense, sparse).values())


def test_sdpa_lse_comes_from_the_backend_in_natural_log():
    q, k, v = (torch.randn(1, 2, 5, 16, dtype=torch.float32) for _ in range(3))
    o, lse = FAMS["prefill"].impls["sdpa_flash"](q, k, v, causal=True, scale=0.3, return_lse=True)
    s = (q.double() @ k.double().transpose(-1, -2)) * 0.3
    s = s.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), -math.inf)
    torch.testing.assert_close(lse.double(), s.logsumexp(-1), atol=1e-5, rtol=0)


# -- Unsupported, with the reason ---------------------------------------------------------------

def _decode_inputs(dtype=torch.float16, D=64, lse=True):
    q = torch.randn(2, 4, 1, D, dtype=dtype)
    k = torch.randn(2, 2, 9, D, dtype=dtype)
    return q, k, k.clone(), dict(scale=None, return_lse=lse)


@pytest.mark.parametrize("name, match", [
    ("sdpa", "returns no LSE"), ("sdpa_math", "returns no LSE"),
    ("sdpa_efficient", "CUDA backend"), ("sdpa_cudnn", "CUDA backend"),
])
def test_sdpa_backends_without_an_lse_or_this_device_are_unsupported(name, match):
    q, k, v, kw = _decode_inputs()
    with pytest.raises(Unsupported, match=match):
        FAMS["decode"].impls[name](q, k, v, **kw)


def test_vllm_unified_attention_is_causal_only_and_has_no_lse(monkeypatch):
    with pytest.raises(Unsupported, match="vllm not installed"):
        FAMS["prefill"].impls["vllm"](*(torch.randn(1, 2, 4, 64, dtype=torch.float16),) * 3, causal=True)
    _stand_in(monkeypatch, vllm, "_op", lambda modules, name: getattr(fake_vllm(), name))
    q = torch.randn(1, 2, 4, 64, dtype=torch.float16)
    with pytest.raises(Unsupported, match="causal only"):
        FAMS["prefill"].impls["vllm"](q, q, q, causal=False)
    with pytest.raises(Unsupported, match="no LSE"):
        FAMS["prefill"].impls["vllm"](q, q, q, causal=True, return_lse=True)


def test_library_limits_are_unsupported(monkeypatch):
    _stand_in(monkeypatch, flashinfer, "_fi", lambda: fake_flashinfer())
    _stand_in(monkeypatch, flag_gems, "_ops", lambda: fake_flag_gems())
    for dtype, D, lib, match in [(torch.float32, 64, "flashinfer", "dtype float32"),
                                 (torch.float16, 96, "flashinfer", "head dim 96"),
                                 (torch.float32, 64, "flag_gems", "dtype float32"),
                                 (torch.float16, 320, "flag_gems", "head dim 320")]:
        q, k, v, kw = _decode_inputs(dtype, D)
        with pytest.raises(Unsupported, match=match):
            FAMS["decode"].impls[lib](q, k, v, **kw)


def test_vllm_decode_refuses_an_empty_sequence(monkeypatch):
    _stand_in(monkeypatch, vllm, "_op", lambda modules, name: getattr(fake_vllm(), name))
    case = next(c for c in _quick("paged_decode") if 0 in c["lengths"])
    outcome = run_case(FAMS["paged_decode"], case, CpuDevice(), FAMS["paged_decode"].impls["vllm"])
    assert outcome.status == "unsupported" and "length 0" in outcome.message


# -- a library that is installed but broken: reported once, its cases unsupported ----------------

def test_a_broken_library_is_reported_once_and_its_cases_are_unsupported(tmp_path, monkeypatch):
    (tmp_path / "attnsuite_test_broken_lib.py").write_text("raise RuntimeError('No device were detected on your machine !')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    # "torch" as the distribution: installed, so its breakage is news worth a warning.
    lib = Library("BrokenLib", "attnsuite_test_broken_lib", "torch", written_against="1.0")
    missing = Library("MissingLib", "attnsuite_test_no_such_module", "attnsuite-no-such-dist", written_against="1.0")

    def prepare_for(library):
        def prepare(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
            library.load()
            raise AssertionError("unreachable: the library does not import")
        return staged(library, prepare)

    cases = _quick("decode", limit=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        broken = _run("decode", prepare_for(lib), cases)
        absent = _run("decode", prepare_for(missing), cases)
    assert all(o.status == "unsupported" and "RuntimeError: No device were detected" in o.message
               for o in broken.values())
    assert all(o.status == "unsupported" and "not installed" in o.message for o in absent.values())
    said = [w for w in caught if issubclass(w.category, LibraryUnusable)]
    assert len(said) == 1 and "BrokenLib" in str(said[0].message)  # once, and only for the installed one


def test_a_release_without_the_op_is_unsupported_naming_it():
    lib = Library("torch", "torch", "torch", written_against="x")
    with pytest.raises(Unsupported, match=r"has no torch\.no_such_op"):
        lib.attribute("no_such_op")


# -- notes: what an adapter did to the case, in the record ----------------------------------------

def test_adapter_notes_reach_the_outcome_and_the_record():
    case = _quick("paged_decode", lambda c: c["lse"], limit=1)[0]
    outcome = run_case(FAMS["paged_decode"], case, CpuDevice(), FAMS["paged_decode"].impls["sdpa_flash"])
    assert outcome.status == "pass"
    assert any("gathered" in n for n in outcome.adapter_notes)
    assert any("natural log" in n for n in outcome.adapter_notes)
    rec = build_record(case, "sdpa_flash", {"kind": "cpu"}, outcome, ("pass", None, ""), {}, {})
    assert rec["adapter_notes"] == list(outcome.adapter_notes)
    ours = run_case(FAMS["paged_decode"], case, CpuDevice(), FAMS["paged_decode"].impls["triton"])
    assert ours.adapter_notes == ()  # the project's kernels say nothing


def test_notes_are_collected_only_inside_collecting():
    ecosystem.note("outside")  # no collector: dropped, no error
    with ecosystem.collecting() as outer:
        ecosystem.note("a")
        with ecosystem.collecting() as inner:
            ecosystem.note("b")
        ecosystem.note("a")
    assert outer == ["a"] and inner == ["b"]


def test_a_session_records_adapter_notes(run_suite):
    run = run_suite("cases/paged_decode.py", "-k", "HND and lse", "--maxfail", "1",
                    "--impl", "paged_decode=sdpa_flash", "-x")
    recs = [r for r in run.records if r["impl"] == "sdpa_flash" and not r["unsupported"]]
    assert recs and all(r["outcome"] == "pass" for r in recs), run.output[-2000:]
    assert all(any("gathered" in n for n in r["adapter_notes"]) for r in recs)
    # The fp8 caches SDPA cannot take (no k_scale / v_scale) are recorded with the reason.
    refused = [r["unsupported"] for r in run.records if r["impl"] == "sdpa_flash" and r["unsupported"]]
    assert all("k_scale" in m for m in refused), refused


# -- stand-ins for libraries not installed here, from their documented semantics ------------------

LN2 = math.log(2.0)


def _attend(q, k, v, scale, causal=False):
    """q [H, Sq, D], k/v [Hkv, Sk, D] -> (o [H, Sq, D] in q's dtype, natural-log lse [H, Sq] fp32);
    causal is bottom-right aligned (flash-attn's and vLLM's rule)."""
    H, Sq, D = q.shape
    Hkv, Sk = k.shape[0], k.shape[1]
    kk = k.double().repeat_interleave(H // Hkv, 0)
    vv = v.double().repeat_interleave(H // Hkv, 0)
    s = q.double() @ kk.transpose(-1, -2) * (scale if scale is not None else D ** -0.5)
    if causal:
        s = s.masked_fill(torch.ones(Sq, Sk, dtype=torch.bool).triu(Sk - Sq + 1), -math.inf)
    lse = s.logsumexp(-1)
    p = torch.where(lse[..., None] > -math.inf, (s - lse[..., None]).exp(), 0.0)
    return (p @ vv).to(q.dtype), lse.float()



def _stand_in(mp, adapter_module, attr, value):
    """Install a documented stand-in for a library that is not installed here: the adapter's
    loader returns it, and the runner's check that the library imports (``Library.load``, before
    any input is built) sees it as importable."""
    mp.setattr(adapter_module, attr, value)
    name, real = adapter_module.LIBRARY.module, ecosystem_library._import
    mp.setattr(ecosystem_library, "_import", lambda n: (types.ModuleType(n), None) if n == name else real(n))

def fake_flashinfer(lse_base2: bool = True):
    """FlashInfer's documented calls; LSE base 2 like the real one (or natural log, to show that
    the suite notices a base mixup)."""
    to_lib = (lambda l: l / LN2) if lse_base2 else (lambda l: l)

    def single_decode_with_kv_cache(q, k, v, kv_layout="NHD", sm_scale=None, return_lse=False):
        if kv_layout == "NHD":
            k, v = k.transpose(0, 1), v.transpose(0, 1)
        o, l = _attend(q[:, None], k, v, sm_scale)
        return (o[:, 0], to_lib(l[:, 0])) if return_lse else o[:, 0]

    def single_prefill_with_kv_cache(q, k, v, causal=False, kv_layout="NHD", sm_scale=None, return_lse=False):
        if kv_layout == "NHD":
            k, v = k.transpose(0, 1), v.transpose(0, 1)
        o, l = _attend(q.transpose(0, 1), k, v, sm_scale, causal)
        return (o.transpose(0, 1), to_lib(l.transpose(0, 1))) if return_lse else o.transpose(0, 1)

    class BatchDecodeWithPagedKVCacheWrapper:
        def __init__(self, workspace, kv_layout="NHD"):
            self.layout = kv_layout

        def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size, *,
                 q_data_type=None, kv_data_type=None, sm_scale=None):
            self.table, self.page_size, self.sm_scale = (indptr, indices, last_page_len), page_size, sm_scale

        def run(self, q, kv_cache, out=None, lse=None, return_lse=False):
            indptr, indices, last = self.table
            k_all, v_all = kv_cache[:, 0], kv_cache[:, 1]
            if self.layout == "NHD":
                k_all, v_all = k_all.transpose(1, 2), v_all.transpose(1, 2)  # [pages, Hkv, P, D]
            out = out if out is not None else torch.empty_like(q)
            lse = lse if lse is not None else torch.empty(q.shape[:2], dtype=torch.float32)
            for b in range(q.shape[0]):
                pages = indices[indptr[b]:indptr[b + 1]].long()
                n = self.page_size * (len(pages) - 1) + int(last[b]) if len(pages) else 0
                k = k_all[pages].transpose(0, 1).reshape(k_all.shape[1], -1, q.shape[-1])[:, :n]
                v = v_all[pages].transpose(0, 1).reshape(v_all.shape[1], -1, q.shape[-1])[:, :n]
                o, l = _attend(q[b][:, None], k, v, self.sm_scale)
                out[b], lse[b] = o[:, 0], to_lib(l[:, 0])
            return (out, lse) if return_lse else out

    class BatchPrefillWithRaggedKVCacheWrapper:
        def __init__(self, workspace, kv_layout="NHD"):
            assert kv_layout == "NHD"

        def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim, *, causal=False, sm_scale=None,
                 q_data_type=None):
            self.cu, self.causal, self.sm_scale = qo_indptr.tolist(), causal, sm_scale

        def run(self, q, k, v, out=None, lse=None, return_lse=False):
            out = out if out is not None else torch.empty_like(q)
            lse = lse if lse is not None else torch.empty(q.shape[:2], dtype=torch.float32)
            for a, b in zip(self.cu[:-1], self.cu[1:]):
                o, l = _attend(q[a:b].transpose(0, 1), k[a:b].transpose(0, 1), v[a:b].transpose(0, 1),
                               self.sm_scale, self.causal)
                out[a:b], lse[a:b] = o.transpose(0, 1), to_lib(l.transpose(0, 1))
            return (out, lse) if return_lse else out

    class BatchMLAPagedAttentionWrapper:
        """flashinfer.mla's wrapper: queries packed by qo_indptr, one latent row per token read
        through the CSR page table up to kv_len_arr[b] tokens; causal aligned bottom-right."""
        def __init__(self, float_workspace_buffer, use_cuda_graph=False, qo_indptr=None, kv_indptr=None,
                     kv_indices=None, kv_len_arr=None, backend="auto"):
            pass

        def plan(self, qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_heads, head_dim_ckv, head_dim_kpe, page_size,
                 causal, sm_scale, q_data_type, kv_data_type, use_profiler=False):
            assert qo_indptr.dtype == kv_indptr.dtype == kv_indices.dtype == kv_len_arr.dtype == torch.int32
            self.qo, self.kv_ptr, self.kv_len = qo_indptr.tolist(), kv_indptr.tolist(), kv_len_arr.tolist()
            self.indices, self.page_size, self.causal, self.sm_scale = kv_indices, page_size, causal, sm_scale
            self.dims, self.heads, self.dtypes = (head_dim_ckv, head_dim_kpe), num_heads, (q_data_type, kv_data_type)

        def run(self, q_nope, q_pe, ckv_cache, kpe_cache, out=None, lse=None, return_lse=False, profiler_buffer=None,
                kv_len=None, page_table=None):
            assert (q_nope.shape[-1], q_pe.shape[-1]) == self.dims and q_nope.shape[1] == self.heads
            assert (q_nope.dtype, ckv_cache.dtype) == self.dtypes and ckv_cache.shape[1] == self.page_size
            out = out if out is not None else torch.empty_like(q_nope)
            assert out.shape == q_nope.shape and out.dtype == q_nope.dtype
            lse = lse if lse is not None else torch.empty(q_nope.shape[:2], dtype=torch.float32)
            Dc = q_nope.shape[-1]
            for b in range(len(self.qo) - 1):
                rows, n = slice(self.qo[b], self.qo[b + 1]), self.kv_len[b]
                pages = self.indices[self.kv_ptr[b]:self.kv_ptr[b + 1]].long()
                ckv = ckv_cache[pages].reshape(-1, Dc)[:n]
                kpe = kpe_cache[pages].reshape(-1, kpe_cache.shape[-1])[:n]
                q = torch.cat([q_nope[rows], q_pe[rows]], -1).transpose(0, 1)  # [H, n_b, Dc + Dr]
                o, l = _attend(q, torch.cat([ckv, kpe], -1)[None], ckv[None], self.sm_scale, self.causal)
                out[rows], lse[rows] = o.transpose(0, 1), to_lib(l.transpose(0, 1))
            return (out, lse) if return_lse else out

    mla = types.SimpleNamespace(BatchMLAPagedAttentionWrapper=BatchMLAPagedAttentionWrapper)
    return types.SimpleNamespace(**locals())


def fake_vllm():
    """vLLM's decode_attention_fwd, addressing the pools exactly as its kernel does
    (``(page * page_size + slot) * stride(-3) + head * stride(-2)``), and unified_attention."""

    def decode_attention_fwd(q, k_buffer, v_buffer, o, lse, req_to_token, b_seq_len, attn_logits, num_kv_splits,
                             sm_scale, page_size=1, logit_cap=0.0, k_scale=None):
        assert num_kv_splits == attn_logits.shape[2] and attn_logits.shape[3] == v_buffer.shape[-1] + 1
        assert q.shape[-1] == k_buffer.shape[-1] and o.shape[-1] == v_buffer.shape[-1]
        # An fp8 cache is read as fp8 * k_scale on both sides (one fp32 scale tensor).
        dequant = (lambda x: x) if k_scale is None else (lambda x: x.double() * float(k_scale))

        def tokens(buf, b, n):
            t = torch.arange(n)
            loc = req_to_token[b, t // page_size].long() * page_size + t % page_size
            flat = buf.as_strided((int(loc.max()) + 1, buf.shape[-2], buf.shape[-1]),
                                  (buf.stride(-3), buf.stride(-2), 1), buf.storage_offset())
            return dequant(flat.view(torch.uint8)[loc].view(buf.dtype) if buf.element_size() == 1
                           else flat[loc]).transpose(0, 1)
        for b in range(q.shape[0]):
            n = int(b_seq_len[b])
            out_b, l = _attend(q[b][:, None], tokens(k_buffer, b, n), tokens(v_buffer, b, n), sm_scale)
            o[b], lse[b] = out_b[:, 0], l[:, 0]

    def unified_attention(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale, causal,
                          window_size, block_table, softcap, q_descale, k_descale, v_descale):
        assert causal and q_descale is None
        cu = cu_seqlens_q.tolist()
        for b in range(len(cu) - 1):
            n = int(seqused_k[b])
            pages = block_table[b, :-(-n // k.shape[1])].long()
            kk = k[pages].reshape(-1, *k.shape[2:])[:n].transpose(0, 1)
            vv = v[pages].reshape(-1, *v.shape[2:])[:n].transpose(0, 1)
            o, _ = _attend(q[cu[b]:cu[b + 1]].transpose(0, 1), kk, vv, softmax_scale, True)
            out[cu[b]:cu[b + 1]] = o.transpose(0, 1)

    return types.SimpleNamespace(**locals())


def fake_flag_gems():
    """FlagGems 5.0.2's flash_attention_forward (BSHD, aten convention) and flash_attn_varlen_func."""

    def flash_attention_forward(q, k, v, cu_q, cu_k, max_q, max_k, dropout_p, is_causal, return_debug_mask, *,
                                scale=None):
        assert cu_q is None and cu_k is None and dropout_p == 0.0
        outs = [_attend(q[b].transpose(0, 1), k[b].transpose(0, 1), v[b].transpose(0, 1), scale, is_causal)
                for b in range(q.shape[0])]
        return torch.stack([o.transpose(0, 1) for o, _ in outs]), torch.stack([l for _, l in outs]), None, None, None

    def flash_attn_varlen_func(q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k=None, seqused_k=None,
                               softmax_scale=None, causal=False, block_table=None, return_softmax_lse=False, out=None):
        out = out if out is not None else torch.empty_like(q)
        lse = torch.empty(q.shape[1], q.shape[0], dtype=torch.float32)
        cu = cu_seqlens_q.tolist()
        for b in range(len(cu) - 1):
            if block_table is None:
                kk, vv = k[cu_seqlens_k[b]:cu_seqlens_k[b + 1]], v[cu_seqlens_k[b]:cu_seqlens_k[b + 1]]
            else:
                n = int(seqused_k[b])
                pages = block_table[b, :-(-n // k.shape[1])].long()
                kk, vv = k[pages].reshape(-1, *k.shape[2:])[:n], v[pages].reshape(-1, *v.shape[2:])[:n]
            o, l = _attend(q[cu[b]:cu[b + 1]].transpose(0, 1), kk.transpose(0, 1), vv.transpose(0, 1), softmax_scale,
                           causal)
            out[cu[b]:cu[b + 1]] = o.transpose(0, 1)
            # flash-attn's convention for a row with no key: +inf
            lse[:, cu[b]:cu[b + 1]] = torch.where(l == -math.inf, math.inf, l)
        return (out, lse) if return_softmax_lse else out

    return types.SimpleNamespace(**locals())


FAKES = {
    "flashinfer": lambda mp: _stand_in(mp, flashinfer, "_fi", lambda: fake_flashinfer()),
    "vllm": lambda mp: _stand_in(mp, vllm, "_op", lambda modules, name: getattr(fake_vllm(), name)),
    "flag_gems": lambda mp: _stand_in(mp, flag_gems, "_ops", lambda: fake_flag_gems()),
}


def _fp16_or_bf16(c):
    return c.params["dtype"] in ("fp16", "bf16")


@pytest.mark.parametrize("family", ["prefill", "decode", "prefill_varlen", "paged_decode"])
@pytest.mark.parametrize("lib", sorted(FAKES))
def test_library_mapping_of_layouts_scale_and_lse_against_a_documented_stand_in(lib, family, monkeypatch):
    FAKES[lib](monkeypatch)
    impl = FAMS[family].impls[lib]
    if lib == "vllm" and family in ("prefill", "prefill_varlen"):  # causal, no LSE: what unified_attention takes
        cases = [dataclasses.replace(c, label=c.label + "-nolse", params={**c.params, "lse": False})
                 for c in _quick(family, lambda c: _fp16_or_bf16(c) and c["causal"], limit=10)]
    else:
        cases = _quick(family, _fp16_or_bf16, limit=10)
    outcomes = _run(family, impl, cases)
    if lib == "vllm" and family == "paged_decode":  # empty sequences are refused, the rest must pass
        outcomes = {cid: o for cid, o in outcomes.items() if "length 0" not in o.message}
    if lib == "flashinfer" and family in ("decode", "prefill"):
        outcomes = {cid: o for cid, o in outcomes.items() if "head dim" not in o.message}
    _assert_all_pass(outcomes)


def test_a_base_2_lse_passed_on_as_natural_log_fails_its_cases(monkeypatch):
    # A FlashInfer that returned natural-log LSE would be mis-scaled by the adapter's ln 2:
    # the LSE cases must fail, which is what would catch an adapter that forgot the conversion.
    _stand_in(monkeypatch, flashinfer, "_fi", lambda: fake_flashinfer(lse_base2=False))
    cases = _quick("paged_decode", lambda c: c["lse"] and _fp16_or_bf16(c), limit=4)
    outcomes = _run("paged_decode", FAMS["paged_decode"].impls["flashinfer"], cases)
    assert outcomes and all(o.status == "fail" and "lse" in o.message for o in outcomes.values())


def test_a_backend_that_refuses_gqa_gets_repeated_heads_and_says_so(monkeypatch):
    real = torch.nn.functional.scaled_dot_product_attention

    def no_gqa(q, k, v, *, enable_gqa=False, **kw):  # as some CUDA backends of some torch releases
        if enable_gqa:
            raise RuntimeError("No available kernel. Aborting execution.")
        return real(q, k, v, **kw)
    monkeypatch.setattr(torch_sdpa.F, "scaled_dot_product_attention", no_gqa)
    case = next(c for c in _quick("decode") if c["Hq"] != c["Hkv"] and not c["lse"])
    outcome = run_case(FAMS["decode"], case, CpuDevice(), FAMS["decode"].impls["sdpa_math"])
    assert outcome.status == "pass", outcome.message
    assert any("repeated" in n for n in outcome.adapter_notes)


def fake_torch_npu():
    """torch_npu's two fused operators as documented (BNSD; block tables for the paged form)."""

    def npu_fused_infer_attention_score(query, key, value, *, num_heads, num_key_value_heads, input_layout, scale,
                                        softmax_lse_flag=False, block_table=None, block_size=None,
                                        actual_seq_lengths_kv=None):
        assert input_layout == "BNSD" and query.shape[1] == num_heads
        B = query.shape[0]
        outs, lses = [], []
        for b in range(B):
            if block_table is None:
                k, v = key[b], value[b]
            else:  # key/value [blocks, Hkv, block_size, D]
                n = actual_seq_lengths_kv[b]
                pages = block_table[b, :-(-n // block_size)].long()
                k = key[pages].transpose(0, 1).reshape(num_key_value_heads, -1, key.shape[-1])[:, :n]
                v = value[pages].transpose(0, 1).reshape(num_key_value_heads, -1, value.shape[-1])[:, :n]
            o, l = _attend(query[b], k, v, scale)
            outs.append(o), lses.append(l)
        return torch.stack(outs), torch.stack(lses)[..., None]

    def npu_fusion_attention(query, key, value, *, head_num, input_layout, scale, keep_prob, sparse_mode, atten_mask):
        assert input_layout == "BNSD" and keep_prob == 1.0
        o = torch.stack([_attend(query[b], key[b], value[b], scale, causal=sparse_mode == 2)[0]
                         for b in range(query.shape[0])])
        return o, None, None, None

    module = types.ModuleType("torch_npu")
    module.npu_fused_infer_attention_score = npu_fused_infer_attention_score
    module.npu_fusion_attention = npu_fusion_attention
    return module


@pytest.mark.parametrize("family, name", [("prefill", "npu_fusion_attention"), ("decode", "npu_fused_infer"),
                                          ("paged_decode", "npu_fused_infer")])
def test_ascend_operators_are_reachable_as_adapters(family, name, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch_npu", fake_torch_npu())
    ecosystem_library._import.cache_clear()
    try:
        cases = _quick(family, _fp16_or_bf16, limit=12)
        if family == "prefill":  # npu_fusion_attention gives no LSE: the same cases without one
            cases = [dataclasses.replace(c, label=c.label + "-nolse", params={**c.params, "lse": False}) for c in cases]
        outcomes = _run(family, FAMS[family].impls[name], cases)
    finally:
        ecosystem_library._import.cache_clear()
    ran = {cid: o for cid, o in outcomes.items() if o.status != "unsupported"}
    _assert_all_pass(ran)
    refused = [o.message for o in outcomes.values() if o.status == "unsupported"]
    assert all("LSE" in m or "block_size" in m or "limits" in m for m in refused), refused


def test_a_library_result_of_another_shape_than_documented_fails_the_case_saying_so(monkeypatch):
    # FlagGems' decode path swaps query groups into the sequence axis when Hq > Hkv: an LSE that
    # came back in that layout must be a failure naming the shapes, never reshaped into place.
    fake = fake_flag_gems()
    real = fake.flash_attn_varlen_func

    def swapped(*args, **kw):
        o, lse = real(*args, **kw)
        return (o, lse.reshape(-1, lse.shape[0] * lse.shape[1] // 2).contiguous()) if kw.get("return_softmax_lse") \
            else o
    fake.flash_attn_varlen_func = swapped
    _stand_in(monkeypatch, flag_gems, "_ops", lambda: fake)
    case = next(c for c in _quick("paged_decode", lambda c: c["lse"] and _fp16_or_bf16(c)) if len(c["lengths"]) > 1)
    outcome = run_case(FAMS["paged_decode"], case, CpuDevice(), FAMS["paged_decode"].impls["flag_gems"])
    assert outcome.status == "fail" and "documented" in outcome.message and "softmax_lse" in outcome.message


# -- MLA: FlashInfer's MLA wrapper and vLLM's Triton MLA decode ------------------------------------

def _widened(c, Dc=512, Dr=64):
    """``c`` at DeepSeek's widths (the ones FlashInfer documents for its MLA wrapper)."""
    if (c["Dc"], c["Dr"]) == (Dc, Dr):
        return c
    return dataclasses.replace(c, label=f"{c.label}-w{Dc}_{Dr}", params={**c.params, "Dc": Dc, "Dr": Dr})


@pytest.mark.parametrize("family", ["mla_paged_decode", "mla_paged_prefill"])
def test_flashinfer_mla_maps_page_table_scale_lse_and_out_against_a_documented_stand_in(family, monkeypatch):
    _stand_in(monkeypatch, flashinfer, "_fi", lambda: fake_flashinfer())
    cases = [_widened(c) for c in _quick(family)]  # every class of the quick catalog
    outcomes = _run(family, FAMS[family].impls["flashinfer"], cases)
    ran = {cid: o for cid, o in outcomes.items() if o.status != "unsupported"}
    _assert_all_pass(ran)
    refused = {c.id: c["cache"] for c in cases if outcomes[c.id].status == "unsupported"}
    assert set(refused.values()) <= {"fp8_scaled", "fp8_edge", "fp8"}  # fp8 caches, and nothing else
    assert len(ran) >= 20 and any(c["lse"] for c in cases if c.id in ran)
    if family == "mla_paged_prefill":  # causal and not, both bottom-right aligned as FlashInfer's
        assert {c["causal"] for c in cases if c.id in ran} == {True, False}
    notes = {n for o in ran.values() for n in o.adapter_notes}
    assert any("base-2" in n for n in notes) and any("kv_len_arr" in n for n in notes)


def test_flashinfer_mla_refuses_fp8_caches_and_other_widths_saying_why(monkeypatch):
    _stand_in(monkeypatch, flashinfer, "_fi", lambda: fake_flashinfer())
    fp8 = _widened(next(c for c in _quick("mla_paged_decode") if c["cache"] != "same"))
    narrow = next(c for c in _quick("mla_paged_decode") if c["cache"] == "same" and c["Dc"] != 512)
    impl = FAMS["mla_paged_decode"].impls["flashinfer"]
    outcome = run_case(FAMS["mla_paged_decode"], fp8, CpuDevice(), impl)
    assert outcome.status == "unsupported" and "float8_e4m3fn" in outcome.message and "k_scale" in outcome.message
    outcome = run_case(FAMS["mla_paged_decode"], narrow, CpuDevice(), impl)
    assert outcome.status == "unsupported" and "head_dim_ckv" in outcome.message


def test_flashinfer_mla_lse_left_in_base_2_would_fail(monkeypatch):
    # A wrapper returning natural-log LSE is mis-scaled by the adapter's ln 2: the check bites.
    _stand_in(monkeypatch, flashinfer, "_fi", lambda: fake_flashinfer(lse_base2=False))
    cases = [_widened(c) for c in _quick("mla_paged_decode", lambda c: c["lse"] and c["cache"] == "same", limit=3)]
    outcomes = _run("mla_paged_decode", FAMS["mla_paged_decode"].impls["flashinfer"], cases)
    assert outcomes and all(o.status == "fail" and "lse" in o.message for o in outcomes.values())


def _vllm_mla(monkeypatch):
    _stand_in(monkeypatch, vllm, "_op", lambda modules, name: getattr(fake_vllm(), name))
    return FAMS["mla_paged_decode"].impls["vllm"]


def test_vllm_triton_mla_maps_block_table_fused_cache_scale_and_lse_against_a_documented_stand_in(monkeypatch):
    impl = _vllm_mla(monkeypatch)
    # The fp8 class with k_scale == v_scale (the one scale vLLM applies) beside the catalog's.
    fp8 = [dataclasses.replace(c, label=c.label + "-fp8same", params={**c.params, "cache": "fp8"})
           for c in _quick("mla_paged_decode", lambda c: c["cache"] != "same" and 0 not in c["lengths"])]
    cases = _quick("mla_paged_decode") + fp8
    outcomes = _run("mla_paged_decode", impl, cases)
    ran = {cid: o for cid, o in outcomes.items() if o.status != "unsupported"}
    _assert_all_pass(ran)
    refused = [o.message for o in outcomes.values() if o.status == "unsupported"]
    assert all("length 0" in m or "v_scale" in m for m in refused), refused
    assert len(ran) >= 20 and fp8 and all(c.id in ran for c in fp8)
    by_view = {c["view"]: outcomes[c.id].adapter_notes for c in cases if c.id in ran}
    # The fused buffer (and its pool slice) is passed as a view; separate caches are copied into one.
    assert any("no copy" in n for n in by_view["fused"]) and any("no copy" in n for n in by_view["pool"])
    assert any("copied into one fused" in n for n in by_view["rowpad"])


def test_vllm_triton_mla_passes_k_scale_as_the_fp8_scale_of_both_sides(monkeypatch):
    from references.mla import mla_paged_decode_reference

    impl = _vllm_mla(monkeypatch)
    case = next(c for c in _quick("mla_paged_decode") if c["cache"] != "same" and 0 not in c["lengths"])
    inputs = FAMS["mla_paged_decode"].make_inputs(case, case.generator())
    args = [inputs[k] for k in FAMS["mla_paged_decode"].interface.positional]
    o, lse = impl(*args, scale=0.2, return_lse=True, k_scale=0.25, v_scale=0.25)
    ref_o, ref_lse = mla_paged_decode_reference(*args, scale=0.2, k_scale=0.25, v_scale=0.25)
    torch.testing.assert_close(o.double(), ref_o, atol=2e-2, rtol=1e-2)
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-4, rtol=1e-5)
    with pytest.raises(Unsupported, match="k_scale 0.25 != v_scale 0.5"):
        impl(*args, scale=0.2, k_scale=0.25, v_scale=0.5)


def test_vllm_triton_mla_refuses_an_empty_sequence(monkeypatch):
    impl = _vllm_mla(monkeypatch)
    case = next(c for c in _quick("mla_paged_decode") if 0 in c["lengths"] and c["cache"] == "same")
    outcome = run_case(FAMS["mla_paged_decode"], case, CpuDevice(), impl)
    assert outcome.status == "unsupported" and "length 0" in outcome.message


@pytest.mark.parametrize("lib", ["vllm", "flashinfer"])
def test_mla_adapters_fill_the_callers_buffers_of_any_stride_and_read_padded_pages(lib, monkeypatch):
    from references.mla import mla_paged_decode_reference

    if lib == "vllm":
        impl = _vllm_mla(monkeypatch)
    else:
        _stand_in(monkeypatch, flashinfer, "_fi", lambda: fake_flashinfer())
        impl = FAMS["mla_paged_decode"].impls["flashinfer"]
    case = _widened(next(c for c in _quick("mla_paged_decode") if c["cache"] == "same" and c["P"] > 1
                         and 0 not in c["lengths"] and len(c["lengths"]) > 1))
    inputs = FAMS["mla_paged_decode"].make_inputs(case, case.generator())
    args = [inputs[k] for k in FAMS["mla_paged_decode"].interface.positional]
    # One fused buffer whose pages hold two slots more than P (page stride != P * token stride).
    ckv, kpe = args[2], args[3]
    pages, P, Dc = ckv.shape
    padded = torch.full((pages, P + 2, Dc + kpe.shape[-1]), float("nan"), dtype=ckv.dtype)
    padded[:, :P, :Dc], padded[:, :P, Dc:] = ckv, kpe
    args[2], args[3] = padded[:, :P, :Dc], padded[:, :P, Dc:]
    B, H = args[0].shape[:2]
    out = torch.full((B, Dc, H), float("nan"), dtype=ckv.dtype).transpose(1, 2)  # last axis not unit-stride
    lse = torch.full((H, B), float("nan"), dtype=torch.float32).t()
    with ecosystem.collecting() as notes:
        o, l = impl(*args, scale=0.1, return_lse=True, out=out, lse=lse)
    assert o is out and l is lse
    ref_o, ref_lse = mla_paged_decode_reference(*args, scale=0.1)
    torch.testing.assert_close(out.double(), ref_o, atol=2e-2, rtol=1e-2)
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-4, rtol=1e-5)
    assert any("caller's buffer" in n for n in notes)
    if lib == "vllm":
        assert any("copied into one fused" in n for n in notes)
