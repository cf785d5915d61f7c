"""Shared fixtures: a private runs folder per test, one torch thread, and GPU tests skipped without CUDA.

Run in parallel (``pytest -n 2 --dist loadgroup``, as ``scripts/test.sh`` does), the tests that start a lab server
or a browser share one worker, and the ``torchrun`` tests another: each of them starts several processes of its
own, and its module-scoped fixtures (one JupyterLab, one set of ``torchrun`` runs) are then made once.
"""

from __future__ import annotations

import contextlib
import os

# One thread per process, here and in every process a test starts (kernels, servers, `python -m lab`): the tests
# share two cores, and a BLAS or OpenMP pool of two threads on a busy core makes small matrix work several times
# slower (its threads spin waiting for each other), so timings would swing with whatever else runs.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)
with contextlib.suppress(ImportError):  # numpy's BLAS, had it been loaded before the variable was set
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)

# tests that run on one worker together (pytest-xdist's ``--dist loadgroup``); the rest are spread over the workers
GROUPS = {"tests/train/test_torchrun.py": "torchrun"}


def pytest_configure(config):
    config.addinivalue_line("markers", "xdist_group(name): run on the same worker as the group's other tests")


def pytest_collection_modifyitems(config, items):
    for item in items:
        group = "ui" if "ui" in item.keywords else GROUPS.get(item.nodeid.split("::")[0])
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
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
