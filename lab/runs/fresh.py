"""A folder made for a run that ``lab train --run-dir DIR`` trains into (a launcher makes it, then starts the run):
what it may hold, checked before anything is trained or written.

It may hold the empty sub-folders a new run starts with (:data:`~lab.runfolder.layout.FOLDERS`) and nothing a run
records: a config, metrics, history, another folder or a checkpoint would mean it holds another run, which is
continued with ``lab resume``. It must hold no link at all, and be no link itself: everything the run writes goes
into it, and a link (``DIR/checkpoints`` to another folder) would have the run refused only at its first write
through the link, after it had trained.
"""

from __future__ import annotations

import os
from pathlib import Path

from lab.runfolder import layout
from lab.runs.catalog import irregular_entries
from lab.runs.store import Run, RunFolderError


def check_fresh_run(path: str | Path) -> Run:
    """The run folder ``path``, once checked to be a real folder made for a new run (see the module docstring).

    Raises:
        FileNotFoundError: there is no such folder.
        RunFolderError: it is a link, holds a link or an entry of the wrong kind, or holds another run's records (the
            message names them).
    """
    run = Run(Path(path))
    if run.path.is_symlink():
        raise RunFolderError(f"{run.path} is a symbolic link: --run-dir takes the run folder itself, into which "
                             "everything the run writes goes; nothing was written")
    if not run.path.is_dir():
        raise FileNotFoundError(f"run folder {run.path} does not exist")
    checkpoints = run.path / layout.CHECKPOINTS
    linked = sorted(e.name for e in os.scandir(run.path) if e.is_symlink())
    if checkpoints.is_dir() and not checkpoints.is_symlink():
        linked += sorted(f"{layout.CHECKPOINTS}/{e.name}" for e in os.scandir(checkpoints) if e.is_symlink())
    if linked:
        raise RunFolderError(f"{run.path} holds symbolic links ({', '.join(linked)}), which the lab never follows or "
                             "writes through: --run-dir takes a folder made for this run; nothing was written")
    irregular = irregular_entries(run.path)
    if irregular:
        raise RunFolderError(f"{run.path} holds entries that are not what the lab writes ({', '.join(irregular)}): "
                             "--run-dir takes a folder made for this run; nothing was written")
    recorded = [p.name for p in run.path.iterdir()
                if p.name in (layout.CONFIG, layout.METRICS, layout.HISTORY)
                or (p.is_dir() and p.name not in layout.FOLDERS)]
    recorded += [f"{layout.CHECKPOINTS}/{p.name}" for p in checkpoints.glob(layout.checkpoint_name("*"))]
    if recorded:
        raise RunFolderError(f"{run.path} is not a fresh run folder (it holds {', '.join(sorted(recorded))}): "
                             "--run-dir takes a folder made for this run; continue a run with `python -m lab "
                             "resume`")
    return run
