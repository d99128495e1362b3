"""Plain, vectorized PyTorch references for every kernel family."""
