"""Residual Lab's tests: a package, so that ``tests.*`` imports this folder even when an installed distribution
ships a top-level ``tests`` package of its own (torch-fidelity does)."""
