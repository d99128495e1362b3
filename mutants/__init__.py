"""Planted-bug implementations (mutants) per family: the suite must fail each one."""
