"""Tile choices that only the Ascend path makes (kernels._checks.on_ascend): the GPU and
interpreter choices stay as they were."""
import torch

from kernels.sparse_decode import sparse_decode_config


def test_sparse_decode_takes_half_the_rows_at_d256_on_ascend_only():
    args = (1, 32, 4096, 256, torch.float16)
    assert sparse_decode_config(*args, interpret=False)["BLOCK_N"] == 32
    assert sparse_decode_config(*args, interpret=False, ascend=True)["BLOCK_N"] == 16
    for D in (64, 128):  # below D=256 the unified buffer has room: no change
        small = (1, 32, 4096, D, torch.float16)
        assert (sparse_decode_config(*small, interpret=False, ascend=True)
                == sparse_decode_config(*small, interpret=False))
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
