"""block_sparse conformance: cases in cases/block_sparse.py. Cases the spec says to skip (frame
exceeds the budget, or a row would keep no block) are skipped with their reason."""
import pytest

from cases.block_sparse import FAMILY, skip_reason


def test_block_sparse(case, conformance):
    reason = skip_reason(case)
    if reason:
        pytest.skip(reason)
    conformance.check(FAMILY, case)
