"""Reading and writing run folders: the store and the catalog, without torch or the models.

One folder per run is the contract between the work that trains (:mod:`lab.train`, :mod:`lab.jobs`, ``lab train``,
``torchrun``, sweeps) and everything that reads it back (the pages, :mod:`lab.reports`, ``lab resume``). Its format —
entry names, bounded reads, atomic writes, the lock — is :mod:`lab.runfolder`, below everything; here are the store
(:mod:`~lab.runs.store`: a run's status, config, metrics and saved snapshots' arrays) and the catalog that lists and
checks the folders found on disk (:mod:`~lab.runs.catalog`). What writes a training run into its folder is training's
(:mod:`lab.train.recorder`, :mod:`lab.train.checkpoint`, :mod:`lab.train.resume`), and what a snapshot is,
:mod:`lab.snapshots`.
"""

from lab.runs.catalog import RunCatalog
from lab.runs.store import FINISHED, STATES, CheckpointError, Run, RunStore, default_runs_dir, sanitize_name

__all__ = ["FINISHED", "STATES", "CheckpointError", "Run", "RunCatalog", "RunStore", "default_runs_dir",
           "sanitize_name"]
