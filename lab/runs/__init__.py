"""The run folder in use: the store, the snapshots it keeps, the recorder that writes a training run into it.

One folder per run is the contract between the work that trains (:mod:`lab.jobs`, ``lab train``, ``torchrun``,
sweeps) and everything that reads it back (the pages, :mod:`lab.reports`, ``lab resume``). Its format — entry names,
bounded reads, atomic writes, the lock — is :mod:`lab.runfolder`, below everything; here are the store
(:mod:`~lab.runs.store`), the snapshots (:mod:`~lab.runs.snapshot`), the recorder that writes a training run
(:mod:`~lab.runs.recorder`), how a run is resumed (:mod:`~lab.runs.resume`) and the catalog that lists and checks the
folders found on disk (:mod:`~lab.runs.catalog`). The names below are imported when first used, so reading a run
folder does not import the training code the recorder needs: the store and the catalog import neither torch nor the
models (checkpoints are written and loaded by :mod:`lab.train.checkpoint`).
"""

from importlib import import_module
from typing import Any

_HOMES = {"RunRecorder": "lab.runs.recorder", "Snapshot": "lab.runs.snapshot", "FINISHED": "lab.runs.store",
          "STATES": "lab.runs.store", "CheckpointError": "lab.runs.store", "Run": "lab.runs.store",
          "RunStore": "lab.runs.store", "default_runs_dir": "lab.runs.store", "sanitize_name": "lab.runs.store",
          "RunCatalog": "lab.runs.catalog"}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'lab.runs' has no attribute {name!r}")
