"""A ledger expecting a compile failure: a numeric failure must not hide behind it."""
from attnsuite.ledger import KnownFailure

KNOWN_FAILURES = [KnownFailure(
    id="expects_compile_error", devices=("cpu",), package="triton", versions=">=0", families=("decode",),
    where={"dtype": ("fp16",)}, stage="compile", match="failed to legalize",
    reason="a different failure")]
