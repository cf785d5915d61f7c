"""The run folder: its format, and everything that reads or writes it.

One folder per run is the contract between the work that trains (:mod:`lab.jobs`, ``lab train``, ``torchrun``,
sweeps) and everything that reads it back (the pages, :mod:`lab.reports`, ``lab resume``). This package is the one
home of that contract: the store (:mod:`~lab.runs.store`), the snapshots it keeps
(:mod:`~lab.runs.snapshot`), the recorder that writes a training run into it (:mod:`~lab.runs.recorder`), the
lock that keeps it to one writer (:mod:`~lab.runfolder.lock`), how a run is resumed (:mod:`~lab.runs.resume`) and the
catalog that lists and checks the folders found on disk (:mod:`~lab.runs.catalog`).
"""

from lab.runs.recorder import RunRecorder
from lab.runs.snapshot import Snapshot
from lab.runs.store import FINISHED, STATES, CheckpointError, Run, RunStore, default_runs_dir, sanitize_name

__all__ = ["FINISHED", "STATES", "CheckpointError", "Run", "RunRecorder", "RunStore", "Snapshot", "default_runs_dir",
           "sanitize_name"]
