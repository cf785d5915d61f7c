"""Shared fixtures: a private runs folder per test, one torch thread, and GPU tests skipped without CUDA."""

from __future__ import annotations

import pytest
import torch

torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def runs_dir(tmp_path, monkeypatch):
    """A fresh runs folder, also set as LAB_RUNS_DIR so nothing lands in the working tree."""
    path = tmp_path / "runs"
    monkeypatch.setenv("LAB_RUNS_DIR", str(path))
    return path
