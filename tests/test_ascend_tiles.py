"""Tile choices that only the Ascend path makes (kernels._checks.on_ascend): the GPU and
interpreter choices stay as they were."""
import torch

from kernels.sparse_decode import sparse_decode_config


def test_sparse_decode_takes_half_the_rows_at_d128_and_d256_on_ascend_only():
    for D, gpu_rows, npu_rows in ((256, 32, 16), (128, 64, 32)):
        args = (1, 32, 4096, D, torch.float16)
        assert sparse_decode_config(*args, interpret=False)["BLOCK_N"] == gpu_rows
        assert sparse_decode_config(*args, interpret=False, ascend=True)["BLOCK_N"] == npu_rows
    tiles = ("BLOCK_N", "BLOCK_D", "num_warps", "num_stages")
    small = (1, 32, 4096, 64, torch.float16)  # at D=64 the unified buffer has room: same tiles
    npu = sparse_decode_config(*small, interpret=False, ascend=True)
    gpu = sparse_decode_config(*small, interpret=False)
    assert {k: npu[k] for k in tiles} == {k: gpu[k] for k in tiles}
    # the list splits aim at the 48 vector cores (32 rows x 3 splits), not 256 programs
    assert (npu["NUM_SPLITS"], gpu["NUM_SPLITS"]) == (3, 8)
    assert (sparse_decode_config(*args, interpret=True, ascend=True)
            == sparse_decode_config(*args, interpret=True))


def test_prefill_tiles_on_ascend_are_64x32_or_32x32_at_d256_and_unchanged_elsewhere():
    from kernels.prefill import prefill_config

    for D, want in ((64, (64, 32)), (128, (64, 32)), (256, (32, 32))):
        cfg = prefill_config(1024, D, torch.float16, interpret=False, ascend=True)
        assert (cfg["BLOCK_M"], cfg["BLOCK_N"]) == want, (D, cfg)
    gpu = prefill_config(1024, 64, torch.float16, interpret=False)
    assert (gpu["BLOCK_M"], gpu["BLOCK_N"]) == (128, 64)
    assert (prefill_config(1024, 64, torch.float16, interpret=True, ascend=True)
            == prefill_config(1024, 64, torch.float16, interpret=True))


def test_sparse_paged_rows_on_ascend_are_4096_elements_at_most_32_for_magicpig():
    """kernels/sparse_paged_decode.py, ``_ascend_tile``, has the measured UB figures."""
    from kernels.sparse_paged_decode import sparse_paged_candidates

    def npu(D, magicpig, dtype=torch.float16):
        (cfg,) = sparse_paged_candidates(D, dtype, magicpig, ascend=True)
        return cfg["BLOCK_N"]

    assert [npu(D, False) for D in (64, 128, 256)] == [64, 32, 16]
    assert [npu(D, True) for D in (64, 128, 256)] == [32, 32, 16]
    assert [npu(D, False, torch.float32) for D in (64, 128)] == [32, 16]
    # The GPU's list is its own (default: one key a thread over 2 warps, 8 rows at D = 64, 4
    # with the chunks of 128 at D = 128 and 256; the plain kernel's 16-row tiles further down).
    for D, rows in ((64, 8), (128, 4), (256, 4)):
        gpu = sparse_paged_candidates(D, torch.float16, True)
        assert gpu[0]["BLOCK_N"] == rows and max(c["BLOCK_N"] for c in gpu) == min(128, 16384 // (D * 2))
        assert all("CORES" not in c for c in gpu)
