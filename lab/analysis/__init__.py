"""Analysis: pure functions on models and captured tensors (tensors in, tensors or arrays out).

Submodules: ``node_maps`` and ``similarity`` (the Playground); ``jacobian``, ``svd``, ``alignment`` (RA2–RA4),
``trajectories`` (RA1), ``rank``, ``collapse``, ``probing``, ``embed`` (Residual Alignment and feature-rank
analyses). Import what you need from the submodule, e.g. ``from lab.analysis.similarity import linear_cka``.
"""
