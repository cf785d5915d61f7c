"""What the Runs page reads, read off the server's event loop: one scan of the run folders a page shows.

A page's callbacks run on the server's event loop, which every session shares; a run folder from elsewhere can hold
a 200 MB ``metrics.jsonl``, thousands of runs, a sweep whose members ask for huge models, or a picture of 150 MB.
So the page never reads run folders itself: it describes what it shows in a :class:`ScanRequest`, :func:`scan`
reads all of it in a worker thread of :data:`POOL` (shared by every session, so ten open tabs cost two threads), and
the page applies the :class:`Scan` on its own thread. Each followed ``metrics.jsonl`` is read a chunk at a time
(:data:`~lab.runfolder.entries.METRICS_CHUNK`): a scan that stopped early says so (``more``) and the page asks for the
next one at once. Unchanged folders cost a few ``stat`` calls (:class:`~lab.runs.catalog.RunCatalog`).

A sweep's rank views need its members' models (:func:`sweep_rank`): built in a bounded child process, under the
memory and time bounds of every page analysis (:mod:`lab.jobs.bounded`), after checks that cost nothing
(:func:`~lab.reports.sweep_snapshot.checkpoint_rank_snapshot`); a worker waits for it.
"""

from __future__ import annotations

import os
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lab.config import ConfigError, config_of_run
from lab.data.toy2d import TOY_DATASETS
from lab.runfolder import layout
from lab.runfolder.entries import read_jsonl, read_picture
from lab.runs.catalog import RunCatalog
from lab.runs.store import Run, RunFolderError
from lab.ui.views.replays import REPLAYS
from lab.ui.views.run_views import table_frame

POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="lab-runs-scan")
"""The threads that read run folders for every Runs page of this process."""
MAX_POINTS = 100_000
"""A toy run's training points are drawn under its replayed snapshots only up to this many samples."""
MAX_STEP_RECORDS = 250
"""The most step records one read of a followed run hands its page (its curves hold a few thousand points)."""
FOLLOW_CHUNK = 2 << 20
"""The most bytes of a followed run's metrics one scan reads: a scan stays short, and the next one comes at the
page's next tick."""


@dataclass(frozen=True)
class Followed:
    """A run whose metric records a page draws, and where its last read of ``metrics.jsonl`` stopped."""

    path: Path
    cursor: int = 0
    file: tuple[int, int] | None = None  # (inode, size) of metrics.jsonl at the last read; None before it


@dataclass(frozen=True)
class ScanRequest:
    """What a page shows: its folders, the opened run and the runs compared.

    Attributes:
        generation: the page's state counter when the request was made (a scan of an older state is dropped).
        folders: the folders listed.
        roots: the folders the server reads runs from.
        stale_after_s: a running run without a heartbeat for this long is stale.
        opened: the opened run (None: none).
        first: whether the opened run was just opened (its training points are then read once).
        figure: the reconstruction picture shown now (read again only when a newer one appears).
        compared: the runs compared.
        most: list only the first ``most`` runs (None: all): the first scan of a page fills the table's first page
            at once, and the next scan, right after, lists them all (3,000 cold folders take seconds to read).
    """

    generation: int
    folders: tuple[Path, ...]
    roots: tuple[Path, ...]
    stale_after_s: float
    opened: Followed | None = None
    first: bool = False
    figure: Path | None = None
    compared: tuple[Followed, ...] = ()
    most: int | None = None


@dataclass
class Records:
    """What one read of a followed run's metrics gave."""

    follow: Followed  # where the next read goes on
    records: list[dict[str, Any]]
    rewritten: bool  # the file was replaced or cut short (a resumed run): the records start again from its start
    more: bool  # the file holds more than this read took


@dataclass
class Opened:
    """The opened run as a scan read it."""

    path: Path
    summary: dict[str, Any]
    config_text: str
    checkpoints: list[dict[str, Any]]
    records: Records
    saved: dict[str, list[int]]  # versions of each kind of saved snapshot on disk
    figure: tuple[int, Path, bytes | None, str | None] | None  # a newer picture: step, path, bytes, why unreadable
    points: tuple[np.ndarray, np.ndarray] | None  # a toy run's training points (the first scan of a run)


class ComparedRuns:
    """The runs a page compares: each one's name, where its metrics were read to, its records so far and its config,
    merged from each scan's reads (:meth:`add`)."""

    def __init__(self) -> None:
        self.runs: dict[Path, tuple[str, Followed, list[dict[str, Any]]]] = {}  # path → name, read to, records
        self.configs: dict[Path, dict[str, Any]] = {}  # as last read
        self._shown: list[Path] | None = None  # the runs the comparison last drew

    def choose(self, names: dict[Path, str]) -> None:
        """Compare the runs ``names`` (path → name); a run compared already keeps what was read of it."""
        self.runs = {path: self.runs.get(path, (name, Followed(path), [])) for path, name in names.items()}
        self.configs = {path: config for path, config in self.configs.items() if path in self.runs}

    def follows(self) -> tuple[Followed, ...]:
        """Where each compared run's metrics are read from next, in order."""
        return tuple(followed for _, followed, _ in self.runs.values())

    def add(self, read: dict[Path, tuple[Records, dict[str, Any]]]
            ) -> tuple[list[str], list[dict[str, Any]], list[list[dict[str, Any]]]] | None:
        """Merge a scan's reads of the compared runs; returns ``(names, configs, records)`` to draw when anything
        changed (new records, a rewritten file, another choice of runs), else None."""
        changed = False
        for path, (records, config) in read.items():
            if path not in self.runs:
                continue
            name, _, old = self.runs[path]
            self.runs[path] = (name, records.follow, (old if not records.rewritten else []) + records.records)
            changed = changed or bool(records.records) or records.rewritten or not old
            self.configs[path] = config
        if not changed and self._shown == list(self.runs):
            return None
        self._shown = list(self.runs)
        return ([name for name, _, _ in self.runs.values()], [self.configs.get(path, {}) for path in self.runs],
                [records for _, _, records in self.runs.values()])


@dataclass
class Scan:
    """Everything a page shows, read by :func:`scan`."""

    generation: int
    summaries: list[dict[str, Any]]
    keys: list[str]  # how the page names each run (:func:`~lab.runs.catalog.run_key`)
    rows: pd.DataFrame  # the run table's rows (:func:`~lab.ui.views.run_views.table_frame`)
    opened: Opened | None = None
    compared: dict[Path, tuple[Records, dict[str, Any]]] = field(default_factory=dict)  # records and config
    partial: bool = False  # the folders hold more runs than this scan listed

    @property
    def more(self) -> bool:
        """Whether the folders hold more runs, or a followed metrics file more records, than this scan read."""
        return self.partial or any(r.more for r in [*([self.opened.records] if self.opened else []),
                                    *(r for r, _ in self.compared.values())])


def metrics_file(path: Path) -> tuple[int, int] | None:
    """``(inode, size)`` of the run folder ``path``'s metrics.jsonl; None when missing or not a regular file."""
    try:
        st = os.lstat(path / layout.METRICS)
    except OSError:
        return None
    return (st.st_ino, st.st_size) if stat.S_ISREG(st.st_mode) else None


def follow(followed: Followed) -> Records:
    """Read what was appended to a followed run's metrics since its last read (a chunk at most), from the start
    again when the file was replaced or cut short."""
    now = metrics_file(followed.path)
    before = followed.file
    rewritten = before is not None and (now is None or now[0] != before[0] or now[1] < followed.cursor)
    cursor = 0 if rewritten else followed.cursor
    if now is None:
        return Records(Followed(followed.path, 0, None), [], rewritten, False)
    try:
        lines = read_jsonl(followed.path / layout.METRICS, cursor, FOLLOW_CHUNK)
    except OSError:  # gone or swapped since the stat: the catalog names the problem
        return Records(Followed(followed.path, cursor, now), [], rewritten, False)
    return Records(Followed(followed.path, lines.cursor, now), thinned(lines.records), rewritten, lines.more)


def thinned(records: list[dict[str, Any]], most: int = MAX_STEP_RECORDS) -> list[dict[str, Any]]:
    """``records`` with at most ``most`` of their step records, evenly spaced (every other kind kept whole): a chunk
    of a long metrics file is thinned here, in the worker, rather than point by point on the page's thread."""
    steps = [k for k, r in enumerate(records) if r.get("kind") == "step"]
    if len(steps) <= most:
        return records
    keep = set(steps[::-(-len(steps) // most)])
    return [r for k, r in enumerate(records) if r.get("kind") != "step" or k in keep]


def training_points(run: Run) -> tuple[np.ndarray, np.ndarray] | None:
    """The training points of a toy run (what its node maps are drawn over), or None: not a toy run, no readable
    config, or more than :data:`MAX_POINTS` samples."""
    from lab.train.build import build_data  # the training stack, loaded only for a run that needs it

    try:
        cfg = config_of_run(run)
    except (RunFolderError, ConfigError, ValueError, TypeError):
        return None
    if cfg.data.name not in TOY_DATASETS or cfg.data.n > MAX_POINTS:
        return None
    data = build_data(cfg)
    return data.x_train.numpy(), data.y_train.numpy()


def _newer_figure(path: Path, shown: Path | None) -> tuple[int, Path, bytes | None, str | None] | None:
    """The newest reconstruction picture of a run when it is not the one shown: its step, path, bytes (None when it
    cannot be shown) and why not."""
    pictures = Run(path).figures(layout.RECONSTRUCTION)
    if not pictures or pictures[-1][1] == shown:
        return None
    step, newest = pictures[-1]
    try:
        return step, newest, read_picture(newest), None
    except OSError as err:
        return step, newest, None, str(err)


def scan(catalog: RunCatalog, request: ScanRequest) -> Scan:
    """Read what ``request`` describes (in a worker thread: nothing here touches a page)."""
    roots = list(request.roots)
    paths = catalog.paths(request.folders, roots)
    summaries = catalog.summaries_of(paths[:request.most], stale_after_s=request.stale_after_s)
    keys = [catalog.key(s["path"], roots) for s in summaries]
    out = Scan(request.generation, summaries, keys, table_frame(summaries, keys), partial=len(summaries) < len(paths))
    if request.opened is not None:
        path = request.opened.path
        reader = catalog.reader(path)
        summary = next((s for s in summaries if s["path"] == path), None) \
            or reader.summary(stale_after_s=request.stale_after_s)
        run = Run(path)
        out.opened = Opened(path, summary, reader.config()[1], reader.checkpoints(), follow(request.opened),
                            {k: run.snapshot_versions(k) for k in REPLAYS}, _newer_figure(path, request.figure),
                            training_points(run) if request.first else None)
    for followed in request.compared:
        out.compared[followed.path] = (follow(followed), catalog.reader(followed.path).config()[0])
    return out


def sweep_rank(paths: list[Path]) -> tuple[dict[str, np.ndarray], list[str]]:
    """The rank snapshot of a sweep's members from their last checkpoints
    (:func:`~lab.reports.sweep_snapshot.folders_rank_snapshot`), built in a bounded child process
    (:mod:`lab.jobs.bounded`: the members' models are the sweep folder's to choose) that a worker waits for.

    Raises:
        TaskFailed: a bound ended it, or it raised (its type and message); ServerBusy: the server runs as many page
            analyses as it may.
    """
    from lab.jobs.bounded import BoundedTask
    from lab.reports.sweep_snapshot import folders_rank_snapshot

    task = BoundedTask(folders_rank_snapshot, [str(p) for p in paths], name="lab-sweep-rank").start()
    task.wait()
    return task.result()
