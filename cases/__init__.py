"""Conformance catalogs: one module per kernel family (cases as data) and its test module."""
