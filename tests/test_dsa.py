"""DeepSeek sparse attention and the lightning indexer: the set comparison judges what it must
(a different tie-break passes, a lost winner fails and is shown), bad input is refused before any
launch, and the pair case reports its approximation."""
import pytest
import torch

from attnsuite.devices.cpu import CpuDevice
from attnsuite.runner import run_case
from cases import dsa_sparse_attention as dsa_cases
from cases import dsa_topk_indexer as idx_cases
from kernels.dsa_sparse_attention import dsa_sparse_attention
from kernels.dsa_topk_indexer import dsa_topk_indexer
from mutants import dsa_topk_indexer as idx_mutants
from references.dsa import dsa_indexer_logits_reference, dsa_topk_reference

INDEXER = idx_cases.FAMILY


def _case(family, fragment):
    return next(c for c in family.cases if c.profile == "quick" and fragment in c.id)


def test_a_different_tie_break_picks_another_set_and_passes():
    case = _case(INDEXER, "plain-Hi8-Di128-P16-L100_37-topk24-ties")
    inputs = INDEXER.make_inputs(case, case.generator())
    args = (inputs["q_idx"], inputs["k_cache"], inputs["weights"], inputs["seq_lens"], inputs["block_table"],
            case["topk"])
    got, _ = idx_mutants.dsa_topk_indexer_breaks_ties_other_way(*args, k_scale=inputs["k_scale"])
    logits = dsa_indexer_logits_reference(inputs["q_idx"], inputs["k_cache"], inputs["k_scale"], inputs["weights"],
                                          inputs["seq_lens"], inputs["block_table"])
    ref = dsa_topk_reference(logits, inputs["seq_lens"], case["topk"])
    assert any(set(g.tolist()) != set(r.tolist()) for g, r in zip(got, ref)), "the case has no tie to break"
    problems, _ = idx_cases.judge_topk(got, logits, idx_cases.logit_error_bound(inputs, 8, 128),
                                       inputs["seq_lens"], case["topk"])
    assert problems == []


def test_losing_a_clear_winner_fails_with_the_missed_and_extra_positions():
    case = _case(INDEXER, "plain-Hi8-Di128-P16-L65-topk1-winner")
    outcome = run_case(INDEXER, case, CpuDevice(), idx_mutants.MUTANTS["dsa_topk_indexer_loses_clear_winner"])
    assert outcome.status == "fail" and outcome.stage == "numeric"
    assert "missed: 64 (" in outcome.message and "extra: " in outcome.message
    assert outcome.metrics["topk_indices"]["max_abs_err"] > outcome.metrics["topk_indices"]["allowed"]


def test_our_indexer_passes_the_set_rule_and_returns_logits_within_the_bound():
    case = _case(INDEXER, "packed-Hi8-Di128-P16-L100_37-topk24-edges")
    outcome = run_case(INDEXER, case, CpuDevice(), dsa_topk_indexer)
    assert outcome.status == "pass", outcome.message
    assert set(outcome.metrics) == {"topk_indices", "logits"} and outcome.headroom > 1


def test_the_pair_reports_its_approximation_apart_from_conformance():
    family = dsa_cases.FAMILY
    case = next(c for c in family.cases if c.profile == "quick" and c["pair"])
    outcome = run_case(family, case, CpuDevice(), dsa_sparse_attention)
    assert outcome.status == "pass", outcome.message
    q = outcome.quality
    assert q["vs"].startswith("dense MLA") and 0 <= q["recall_min"] <= 1 and q["max_abs_err"] >= 0


def _attention_inputs():
    g = torch.Generator().manual_seed(0)
    fused = torch.randn((4, 16, 80), generator=g).half()
    return dict(q_nope=torch.randn((2, 4, 64), generator=g).half(), q_pe=torch.randn((2, 4, 16), generator=g).half(),
                ckv_cache=fused[..., :64], kpe_cache=fused[..., 64:],
                sparse_indices=torch.tensor([[0, 5, -1], [63, -1, 7]], dtype=torch.int32))


@pytest.mark.parametrize("change, error, words", [
    (dict(sparse_indices=torch.tensor([[0, 64, -1], [1, 2, 3]], dtype=torch.int32)), ValueError, "sparse_indices"),
    (dict(sparse_indices=torch.tensor([[0, -2, -1], [1, 2, 3]], dtype=torch.int32)), ValueError, "sparse_indices"),
    (dict(sparse_indices=torch.zeros((2, 3), dtype=torch.int64)), TypeError, "sparse_indices must be int32"),
    (dict(sparse_indices=torch.zeros((3, 3), dtype=torch.int32)), ValueError, "sparse_indices"),
    (dict(q_pe=torch.zeros((2, 4, 8), dtype=torch.float16)), ValueError, "q_pe"),
    (dict(kpe_cache=torch.zeros((4, 16, 16), dtype=torch.float32)), TypeError, "kpe_cache"),
    (dict(scale=float("nan")), ValueError, "scale"),
])
def test_sparse_attention_refuses_bad_input_naming_the_argument(change, error, words):
    inputs = {**_attention_inputs(), **change}
    scale = inputs.pop("scale", None)
    with pytest.raises(error, match=words):
        dsa_sparse_attention(**inputs, scale=scale)


def test_sparse_attention_refuses_an_output_that_aliases_the_cache():
    inputs = _attention_inputs()
    with pytest.raises(ValueError, match="out must not share memory with (ckv_cache|kpe_cache)"):
        dsa_sparse_attention(**inputs, out=inputs["ckv_cache"][:2, :4, :64])


def _indexer_inputs():
    case = _case(INDEXER, "plain-Hi4-Di32-P16-L70_3-topk5")
    return INDEXER.make_inputs(case, case.generator())


@pytest.mark.parametrize("change, error, words", [
    (dict(q_idx=torch.zeros((2, 4, 32), dtype=torch.float16)), TypeError, "q_idx"),
    (dict(seq_lens=torch.tensor([70, 3])), TypeError, "seq_lens must be int32"),
    (dict(seq_lens=torch.tensor([7000, 3], dtype=torch.int32)), ValueError, "seq_lens"),
    (dict(k_scale=None), TypeError, "k_scale"),
    (dict(topk=0), ValueError, "topk"),
])
def test_indexer_refuses_bad_input_naming_the_argument(change, error, words):
    inputs = {**_indexer_inputs(), **change}
    topk = inputs.pop("topk", 5)
    k_scale = inputs.pop("k_scale")
    with pytest.raises(error, match=words):
        dsa_topk_indexer(inputs["q_idx"], inputs["k_cache"], inputs["weights"], inputs["seq_lens"],
                         inputs["block_table"], topk, k_scale=k_scale)


def test_indexer_refuses_a_packed_cache_with_a_separate_scale():
    inputs = _indexer_inputs()
    packed = torch.zeros((inputs["k_cache"].shape[0], 16, 1, 132), dtype=torch.uint8)
    with pytest.raises(ValueError, match="Di=32"):
        dsa_topk_indexer(inputs["q_idx"], packed, inputs["weights"], inputs["seq_lens"], inputs["block_table"], 5)


def _definition(name, axes, inputs, outputs):
    return {"name": name, "op_type": "dsa_paged", "axes": axes, "reference": "def run():\n    pass\n",
            "inputs": {k: {"shape": s, "dtype": d} for k, (s, d) in inputs.items()},
            "outputs": {k: {"shape": s, "dtype": d} for k, (s, d) in outputs.items()}}


def test_dsa_paged_workloads_become_cases_of_both_families(tmp_path):
    import json

    from attnsuite.flashinfer_trace.workloads import load

    const = lambda v: {"type": "const", "value": v}  # noqa: E731
    var = {"type": "var"}
    indexer = _definition(
        "dsa_topk_indexer_fp8_h8_d128_topk16_ps16",
        {"batch_size": var, "max_num_pages": var, "num_pages": var, "num_index_heads": const(8),
         "index_head_dim": const(128), "page_size": const(16), "topk": const(16), "kv_cache_num_heads": const(1),
         "head_dim_with_scale": const(132)},
        {"q_index_fp8": (["batch_size", "num_index_heads", "index_head_dim"], "float8_e4m3fn"),
         "k_index_cache_fp8": (["num_pages", "page_size", "kv_cache_num_heads", "head_dim_with_scale"], "int8"),
         "weights": (["batch_size", "num_index_heads"], "float32"), "seq_lens": (["batch_size"], "int32"),
         "block_table": (["batch_size", "max_num_pages"], "int32")},
        {"topk_indices": (["batch_size", "topk"], "int32")})
    sparse = _definition(
        "dsa_sparse_attention_h4_ckv64_kpe16_topk24_ps1",
        {"num_tokens": var, "num_pages": var, "num_qo_heads": const(4), "head_dim_ckv": const(64),
         "head_dim_kpe": const(16), "page_size": const(1), "topk": const(24)},
        {"q_nope": (["num_tokens", "num_qo_heads", "head_dim_ckv"], "float16"),
         "q_pe": (["num_tokens", "num_qo_heads", "head_dim_kpe"], "float16"),
         "ckv_cache": (["num_pages", "page_size", "head_dim_ckv"], "float16"),
         "kpe_cache": (["num_pages", "page_size", "head_dim_kpe"], "float16"),
         "sparse_indices": (["num_tokens", "topk"], "int32")},
        {"output": (["num_tokens", "num_qo_heads", "head_dim_ckv"], "float16"),
         "lse": (["num_tokens", "num_qo_heads"], "float32")})
    sparse["inputs"]["sm_scale"] = {"shape": None, "dtype": "float32"}
    for d in (indexer, sparse):
        (tmp_path / f"{d['name']}.json").write_text(json.dumps(d))
    rows = {indexer["name"]: {"uuid": "ix-1", "axes": {"batch_size": 2, "max_num_pages": 3, "num_pages": 9},
                              "inputs": {}},
            sparse["name"]: {"uuid": "sa-1", "axes": {"num_tokens": 3, "num_pages": 90},
                             "inputs": {"sm_scale": {"type": "scalar", "value": 0.1}}}}
    for name, workload in rows.items():
        (tmp_path / f"{name}.jsonl").write_text(json.dumps({"definition": name, "workload": workload}) + "\n")
    loaded = load(str(tmp_path))
    assert not loaded.problems, loaded.problems
    assert set(loaded.cases) == {"dsa_topk_indexer", "dsa_sparse_attention"}
    for family in (INDEXER, dsa_cases.FAMILY):
        (case,) = loaded.cases[family.name]
        assert not case.params.get("unmapped"), case.params.get("unmapped")
        outcome = run_case(family, case, CpuDevice(), family.default_impl()[1])
        assert outcome.status == "pass", (case.id, outcome.message)
    sa = loaded.cases["dsa_sparse_attention"][0]
    assert sa["scale"] == 0.1 and sa["ctx"] == (30, 30, 30) and sa["P"] == 1
