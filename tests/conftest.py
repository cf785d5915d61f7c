"""Shared fixtures: a private runs folder per test, one torch thread, and GPU tests skipped without CUDA.

Run in parallel (``pytest -n 2 --dist loadgroup``, as ``scripts/test.sh`` does), each file's tests run on one
worker, the tests that start a lab server or a browser share one worker, and the ``torchrun`` tests another: each of
them starts several processes of its own, and module- and session-scoped fixtures (one JupyterLab, one set of
``torchrun`` runs, one reproduction, the tiny diffusion runs) are then made once.
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

# files whose tests run on one worker, one after another, under `--dist loadgroup`, as one group; every other file
# is a group of its own, so a module-scoped fixture (a trained run, a reproduction) is made once, not once per worker
GROUPS = {"tests/ui/test_server.py": "ui", "tests/ui/test_jupyterlab.py": "ui", "tests/ui/test_injection.py": "ui",
          "tests/train/test_torchrun.py": "torchrun",
          "tests/reports/test_samples.py": "diffusion-runs", "tests/reports/test_diffusion_probe.py": "diffusion-runs",
          "tests/reports/test_fid.py": "diffusion-runs"}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` by file: the files :data:`GROUPS` names together, every other file on its own.
    (pytest-xdist's own grouping renames each test with its ``xdist_group`` mark, which pytest 9 no longer lets a
    plugin do: its groups would silently fall apart.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # the order pytest_collection_modifyitems gives, not by test count

    class FileGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::")[0]
            return GROUPS.get(path, path)

    return FileGroups(config, log)


# the long groups, started first under xdist, one on each worker (a worker is given its next file only when
# its own is nearly done): a long group started last leaves the other worker idle while it runs
FIRST = ("tests/ui/test_jupyterlab.py", "tests/ui/test_server.py", "tests/ui/test_injection.py",
         "tests/train/test_torchrun.py", "tests/reproduce/test_full_scale.py")


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(FIRST)))  # stable: the rest keep their order
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
