"""Runs a page follows without having started them: a run folder watched read-only, and the job (if any) of this
server that writes a given folder."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lab.jobs.job import Job
from lab.jobs.process import AttachedJob
from lab.runs.catalog import RunReader
from lab.runs.store import FINISHED, Run


def job_for(jobs: Iterable[Job], path: Path) -> Job | None:
    """The job of ``jobs`` that writes the run folder ``path`` (a sweep job for each of its members), or None."""
    path = path.resolve()
    for job in jobs:
        folders = [job.run.path, *(r.path for r in getattr(job, "runs", ()))]
        if any(f.resolve() == path for f in folders):
            return job
    return None


class WatchedRun(AttachedJob):
    """A run folder followed read-only by a page: status, metrics and snapshots, no control.

    :meth:`stop` does nothing (a page's follower stops its job when the page is thrown away, and a run being
    watched is not the page's to stop); :meth:`status` is cleaned (:func:`~lab.runs.catalog.clean_status`), so a
    damaged status.json cannot break a view; an ``unknown`` state counts as alive, so a folder that a writer has not
    yet given a status.json is watched until it has one. No symbolic link is followed: a linked snapshot (or
    ``snapshots/``) is not there. Its metric records are not read here (:meth:`metrics_since` has none): a watched
    folder may hold a metrics file of hundreds of megabytes, which its page reads in a worker thread, a chunk at a
    time (:mod:`lab.ui.pages.runs_scan`), rather than on the thread that polls this job.
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__(Run(Path(path)))
        self._reader = RunReader(path)

    def stop(self, timeout: float = 5.0) -> None:
        """Watch-only: nothing to stop from here."""

    def status(self) -> dict[str, Any]:
        return self._reader.status()[0]

    def is_alive(self) -> bool:
        return self.status()["state"] not in FINISHED

    def metrics_since(self, cursor: int = 0) -> tuple[list[dict[str, Any]], int]:
        """None: the page that watches this run reads its records itself, off the event loop."""
        return [], cursor
