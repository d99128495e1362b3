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
