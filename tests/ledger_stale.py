"""A ledger claiming fp16 decode fails on cpu: those cases pass, so they must XPASS(strict)."""
from attnsuite.ledger import KnownFailure

KNOWN_FAILURES = [KnownFailure(
    id="stale_entry", devices=("cpu",), package="triton", versions=">=0", families=("decode",),
    where={"dtype": ("fp16",), "S": (17,)}, stage="numeric", match="max abs err",
    reason="claimed broken, actually fixed")]
