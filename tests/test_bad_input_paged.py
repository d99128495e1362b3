"""Bad input for the paged and sparse decode families: a clear error naming the argument,
before any launch."""
import pytest
import torch

import kernels._checks
from kernels.magicpig_decode import magicpig_decode
from kernels.paged_decode import paged_decode
from kernels.sparse_decode import sparse_decode
from kernels.sparse_paged_decode import sparse_paged_decode

MODULES = ("kernels.paged_decode", "kernels.sparse_decode", "kernels.sparse_paged_decode",
           "kernels.magicpig_decode", "kernels._paged")


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    def refuse(plan):
        raise AssertionError("a kernel was launched for bad input")

    monkeypatch.setattr(kernels._checks, "launch", refuse)
    for module in MODULES:
        mod = __import__(module, fromlist=["_"])
        if hasattr(mod, "launch"):
            monkeypatch.setattr(mod, "launch", refuse)


def i32(*values):
    return torch.tensor(values, dtype=torch.int32)


def paged_inputs(Hq=4, Hkv=2, P=4, D=16):
    """Two sequences: 6 tokens on pages [3, 1], 3 tokens on page [0]; a pool of 5 pages."""
    return dict(q=torch.zeros(2, Hq, D, dtype=torch.float16),
                kv_cache=torch.zeros(5, 2, Hkv, P, D, dtype=torch.float16),
                indptr=i32(0, 2, 3), indices=i32(3, 1, 0), last=i32(2, 3))


def sparse_rows(Hq=4, L_max=3):
    ind = torch.zeros(2, Hq, L_max, dtype=torch.int32)
    return ind, torch.full((2, Hq), 2, dtype=torch.int32)


def run_paged(**change):
    a = {**paged_inputs(), **change}
    return paged_decode(a["q"], a["kv_cache"], a["indptr"], a["indices"], a["last"],
                        **{k: v for k, v in change.items() if k in ("layout",)})


def run_sparse_paged(fn=sparse_paged_decode, **change):
    ind, nnz = sparse_rows()
    a = {**paged_inputs(), "ind": ind, "nnz": nnz, **change}
    args = [a["q"], a["kv_cache"], a["indptr"], a["indices"], a["ind"], a["nnz"]]
    if fn is magicpig_decode:
        args += [a.get("K", torch.full((2, 4), 10.0)), a.get("L", torch.full((2, 4), 150.0))]
    return fn(*args, kv_last_page_len=a["last"])


def run_sparse(**change):
    ind, nnz = sparse_rows()
    a = dict(q=torch.zeros(2, 4, 1, 16, dtype=torch.float16), k=torch.zeros(2, 2, 6, 16, dtype=torch.float16),
             v=torch.zeros(2, 2, 6, 16, dtype=torch.float16), ind=ind, nnz=nnz)
    a.update(change)
    return sparse_decode(a["q"], a["k"], a["v"], a["ind"], a["nnz"])


META = torch.device("meta")
BAD = [
    # paged_decode
    ("paged-page-id-out-of-range", lambda: run_paged(indices=i32(3, 5, 0)), "kv_page_indices"),
    ("paged-last-page-len-zero", lambda: run_paged(last=i32(0, 3)), "kv_last_page_len"),
    ("paged-last-page-len-too-big", lambda: run_paged(last=i32(2, 5)), "kv_last_page_len"),
    # docs/contract.md: a sequence with no page has kv_last_page_len 0 (sequence 1 owns no page here).
    ("paged-last-page-len-of-empty-sequence",
     lambda: run_paged(indptr=i32(0, 3, 3), indices=i32(3, 1, 0), last=i32(2, 4)), "kv_last_page_len"),
    ("sparse-paged-last-page-len-of-empty-sequence",
     lambda: run_sparse_paged(indptr=i32(0, 3, 3), indices=i32(3, 1, 0), last=i32(2, 1),
                              nnz=torch.zeros((2, 4), dtype=torch.int32)), "kv_last_page_len"),
    ("paged-int64-indices", lambda: run_paged(indices=i32(3, 1, 0).long()), "kv_page_indices"),
    ("paged-int64-indptr", lambda: run_paged(indptr=i32(0, 2, 3).long()), "kv_page_indptr"),
    ("paged-indptr-decreasing", lambda: run_paged(indptr=i32(0, 3, 2)), "kv_page_indptr"),
    ("paged-indices-on-other-device", lambda: run_paged(indices=i32(3, 1, 0).to(META)), "kv_page_indices"),
    ("paged-gqa", lambda: run_paged(q=torch.zeros(2, 3, 16, dtype=torch.float16)), "Hq"),
    ("paged-layout", lambda: run_paged(layout="BSH"), "layout"),
    ("paged-cache-dtype", lambda: run_paged(kv_cache=torch.zeros(5, 2, 2, 4, 16)), "kv_cache"),
    # sparse_decode
    ("sparse-index-past-S", lambda: run_sparse(ind=torch.full((2, 4, 3), 6, dtype=torch.int32)), "sparse_ind"),
    ("sparse-negative-index", lambda: run_sparse(ind=torch.full((2, 4, 3), -1, dtype=torch.int32)), "sparse_ind"),
    ("sparse-nnz-above-lmax", lambda: run_sparse(nnz=torch.full((2, 4), 4, dtype=torch.int32)), "sparse_nnz"),
    ("sparse-int64-indices", lambda: run_sparse(ind=torch.zeros(2, 4, 3, dtype=torch.int64)), "sparse_ind"),
    ("sparse-nnz-other-device", lambda: run_sparse(nnz=torch.full((2, 4), 2, dtype=torch.int32, device=META)),
     "sparse_nnz"),
    ("sparse-gqa", lambda: run_sparse(k=torch.zeros(2, 3, 6, 16, dtype=torch.float16),
                                      v=torch.zeros(2, 3, 6, 16, dtype=torch.float16)), "Hq"),
    # sparse_paged_decode: sequence 0 has L_0 = 4 * (2 - 1) + 2 = 6 tokens
    ("sparse-paged-token-past-length",
     lambda: run_sparse_paged(ind=torch.full((2, 4, 3), 6, dtype=torch.int32)), "sparse_ind"),
    ("sparse-paged-nnz-above-lmax",
     lambda: run_sparse_paged(nnz=torch.full((2, 4), 9, dtype=torch.int32)), "sparse_nnz"),
    ("sparse-paged-int64-nnz", lambda: run_sparse_paged(nnz=torch.full((2, 4), 2)), "sparse_nnz"),
    ("sparse-paged-page-id", lambda: run_sparse_paged(indices=i32(3, 9, 0)), "kv_page_indices"),
    # magicpig_decode
    ("magicpig-token-past-length",
     lambda: run_sparse_paged(magicpig_decode, ind=torch.full((2, 4, 3), 7, dtype=torch.int32)), "sparse_ind"),
    ("magicpig-K-int", lambda: run_sparse_paged(magicpig_decode, K=torch.full((2, 4), 10)), "K"),
    ("magicpig-L-shape", lambda: run_sparse_paged(magicpig_decode, L=torch.full((2, 3), 150.0)), "L"),
]


@pytest.mark.parametrize("name,call,argument", BAD, ids=[b[0] for b in BAD])
def test_rejected_before_launch_naming_the_argument(name, call, argument):
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert argument in str(info.value), str(info.value)
    assert str(info.value).split(":")[0] in {"paged_decode", "sparse_decode", "sparse_paged_decode",
                                              "magicpig_decode"}, str(info.value)


def test_valid_inputs_pass_validation_and_reach_the_launch():
    with pytest.raises(AssertionError, match="a kernel was launched"):
        run_paged()


def test_a_sequence_with_no_page_and_last_page_len_zero_is_valid():
    with pytest.raises(AssertionError, match="a kernel was launched"):
        run_paged(indptr=i32(0, 3, 3), indices=i32(3, 1, 0), last=i32(2, 0))


def test_last_page_len_of_a_sequence_with_no_page_is_named():
    with pytest.raises(ValueError, match=r"kv_last_page_len values of sequences with no page must be in \[0, 0\], "
                                         r"got 4 at index \[1\]"):
        run_paged(indptr=i32(0, 3, 3), indices=i32(3, 1, 0), last=i32(2, 4))
