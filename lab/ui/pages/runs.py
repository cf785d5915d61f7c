"""The Runs page: every run folder the server may read, in a table that keeps itself current, and one run opened.

Full-scale runs launched by ``torchrun`` on a cluster write the same run folder as the lab's own jobs
(:mod:`lab.runs.store`); mount the cluster's output folder on the machine that serves the lab and watch its runs
here. The page lists the run folders of the server's runs folder (``LAB_RUNS_DIR``) and of one folder the user adds.
An added folder must resolve inside the runs folder or inside a folder named by ``LAB_RUN_DIRS`` when the server
started (paths separated by ``os.pathsep``, as ``LAB_DATA_DIRS``); anything else is refused with a message. Sweep
folders (``sweep.json``) list their members, and a full-scale reproduction's folder (``reproduce.json``) the runs
under its ``runs/``.

The table shows per run its model, state (``running (stale)`` when its heartbeat is old), progress, newest metrics
and the time of its last heartbeat, and what is wrong with a damaged folder; it is refreshed every ``refresh_s``
seconds from file sizes and mtimes (:class:`~lab.runs.catalog.RunCatalog`: unchanged files are not read again).
Opening a run (a row, or ``?run=`` in the URL) follows it read-only (:class:`~lab.jobs.watch.WatchedRun` through
the page's :class:`~lab.ui.follower.JobFollower`): status line, progress, alert with the reason of a failed or
diverged run, and its curves growing as ``metrics.jsonl`` grows; beside them its config and checkpoints, and its
saved snapshots replayed read-only in the views that drew them (:mod:`lab.ui.views.saved_snapshots`). A sweep folder
opens as the comparison of its members and, for residual MLPs, the Rank page's views of their last checkpoints
(:mod:`lab.reports.sweep_snapshot`); a reproduction's folder opens as the comparison of its runs. A run that this
server's job manager trains can be stopped; any other run is watch-only.

Run folders are untrusted input (a cluster's, another person's): the page reads them only in a worker thread
(:mod:`lab.ui.pages.runs_scan`), never on the event loop that every session shares, and applies what was read on its
own thread; a damaged entry is named on its run's row. Everything read from a run folder (its name, status message,
config, metric keys, checkpoint names, problems) and everything typed (the added folder, ``?run=``) is shown as text
(:mod:`lab.ui.text`). The table's cells are plain text and wrap, rather than offering Tabulator's hover tooltip,
which would render a cell's value as HTML.

In a notebook: ``lab.ui.extension()``, then ``RunsPage()`` as a cell's value.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pandas as pd
import panel as pn
import param
from panel.io import PeriodicCallback

from lab.jobs.job import Job
from lab.jobs.manager import JobManager
from lab.jobs.watch import WatchedRun, job_for
from lab.runs.catalog import (
    STALE_AFTER_S,
    RunCatalog,
    find_runs,
    is_reproduction_folder,
    is_run_folder,
    is_sweep_folder,
    resolve_run_path,
    run_key,
    run_roots,
)
from lab.runs.store import FINISHED, Run
from lab.ui.follower import can_schedule, session_id, weak_periodic
from lab.ui.pages.knobs import Knob, bounded_text, knob_class
from lab.ui.pages.page import Page
from lab.ui.pages.runs_scan import POOL, ComparedRuns, Followed, Opened, Scan, ScanRequest, scan, sweep_rank
from lab.ui.text import code, markdown_pane, md
from lab.ui.views.run_compare import CompareViews
from lab.ui.views.run_details import RunDetails
from lab.ui.views.run_views import COLUMNS, RunCurves
from lab.ui.views.saved_snapshots import SavedSnapshots
from lab.ui.views.sweep_rank import SweepRank

log = logging.getLogger(__name__)

COMPARE_CHARS = 8000
"""The longest list of runs to compare (some 150 run names)."""

KNOBS: dict[str, Knob] = {
    "folder": Knob(bounded_text(doc="a folder of runs to list too: a path inside the runs folder or a folder of "
                                    "LAB_RUN_DIRS"), "Folders", training=False),
    "run": Knob(bounded_text(doc="the opened run's folder, relative to the runs folder (or to a folder of "
                                 "LAB_RUN_DIRS)"), "Run", training=False),
    "compare": Knob(bounded_text(doc="runs to compare, as listed in the table, comma-separated (two or more): their "
                                     "curves overlaid", chars=COMPARE_CHARS), "Compare", training=False),
}
WIDTHS = {"run": "24%", "model": "10%", "state": "9%", "progress": "10%", "metrics": "22%", "heartbeat": "8%",
          "problems": "17%"}
TICK_MS = 200
"""How often a served page looks whether its last scan is done (and starts the next one when due)."""
PAGE_ROWS = 25
"""Rows of the run table's page (the browser is sent one page at a time)."""
SCAN_SHARE = 0.2
"""The most of its time a page's periodic scans take: a scan of t seconds is followed by at least 4 t of rest."""


def folder_kind(key: str, roots: list[Path]) -> tuple[Path, str]:
    """The folder ``key`` names inside ``roots`` and what it is: ``run``, ``sweep`` or ``reproduction``.

    Raises:
        PermissionError: it resolves outside the roots.
        FileNotFoundError: it is none of them.
        ValueError: ``key`` holds a NUL byte.
    """
    path = resolve_run_path(key, roots)
    if is_sweep_folder(path):
        return path, "sweep"
    if is_reproduction_folder(path):
        return path, "reproduction"
    if is_run_folder(path):
        return path, "run"
    raise FileNotFoundError(f"{key!r} is not a run folder: it holds none of status.json, config.json, config.yaml, "
                            "metrics.jsonl, checkpoints/")


class RunsPage(knob_class("_RunsKnobs", KNOBS, Page)):
    """List run folders, written here or anywhere, and follow one.

    Attributes:
        table: the run table (one row per run; :data:`~lab.ui.views.run_views.COLUMNS`).
        curves: the opened run's curves.
        roots: the folders this server reads runs from (its runs folder first).
    """

    title = "Runs"
    knobs = KNOBS

    stop = param.Event(label="Stop run")
    refresh_s = param.Number(default=2.0, bounds=(0.2, 60.0), precedence=-1,
                             doc="seconds between table refreshes (set when the page is made)")
    stale_after_s = param.Number(default=STALE_AFTER_S, bounds=(1.0, None), precedence=-1,
                                 doc="a running run whose heartbeat is older than this is marked stale")

    def __init__(self, manager: JobManager | None = None, **params: Any) -> None:
        super().__init__(manager, **params)
        self.manager = self.follower.manager
        self.roots = run_roots(self.manager.store.root)
        self.catalog = RunCatalog()  # read by the scans alone (one at a time), never on the page's thread
        self.summaries: dict[str, dict[str, Any]] = {}  # run key → summary, as last listed
        self._added: Path | None = None  # the added folder, once accepted
        self._path: Path | None = None  # the opened run's folder
        self._opened: Followed | None = None  # where the opened run's metrics were read to
        self._first = False  # the opened run was just opened (its training points are read once)
        self._keys: dict[Path, str] = {}  # run folder → its name in the table and the URL
        self._messages: dict[str, tuple[str, str]] = {}  # topic (folder, run, stop) → (alert kind, text)
        self._syncing = False
        self._generation = 0  # grows with every change of what the page shows: older scans are dropped
        self._scan: Future | None = None
        self._due = 0.0  # when the next periodic scan is due (monotonic seconds)
        self._started = 0.0  # when the last scan started
        self._dirty = True
        self._refresher: PeriodicCallback | None = None
        # served: read in a worker, shown at the session's next tick; in a notebook's kernel (its one user's event
        # loop, whose cell outputs are sent what changed only with the follower's push) and in scripts: right away
        self._served = session_id() is not None
        self._ready = False
        # columns share the width; a long sweep member's name or problem list wraps. Every cell is plain text
        # (Tabulator's "textarea" formatter escapes it); no hover tooltip: Tabulator renders a tooltip as HTML
        # remote pagination: the browser holds one page of rows, so a folder of thousands of runs costs a page's
        # worth of data whenever a row changes
        self.table = pn.widgets.Tabulator(pd.DataFrame(columns=list(COLUMNS)), disabled=True, show_index=False,
                                          selectable=1, layout="fit_columns", widths=WIDTHS,
                                          formatters=dict.fromkeys(COLUMNS, {"type": "textarea"}),
                                          pagination="remote", page_size=PAGE_ROWS,
                                          sizing_mode="stretch_width", max_height=420)
        self.table.param.watch(self._selected, "selection")
        self.curves = RunCurves()
        self.details = RunDetails()
        self._plots = pn.Column(sizing_mode="stretch_width")
        self._stop_button = pn.widgets.Button.from_param(self.param.stop, color="danger", width=110, disabled=True)
        self._stop_note = markdown_pane("", margin=(0, 10), sizing_mode="stretch_width")
        self.comparison = CompareViews()
        self.compared = ComparedRuns()
        self._last_summary: dict[str, Any] | None = None  # the opened run's, as last read
        # a native multiple select: its options are text (a run folder's name is never markup; a MultiChoice would
        # render it as HTML)
        self._compare_choice = pn.widgets.MultiSelect(label="Compare runs (two or more; Ctrl-click)", options=[],
                                                      value=[], size=6, sizing_mode="stretch_width")
        self._compare_choice.param.watch(lambda e: setattr(self, "compare", ",".join(e.new)), "value")
        self.saved = SavedSnapshots(POOL)  # snapshots read and checked off the event loop
        self.sweep = SweepRank()
        self._main = pn.Column(self.table, self.comparison.layout, self.sweep.layout, self.details.header, self._plots,
                               self.saved.layout, self.details.figure, self.details.details,
                               sizing_mode="stretch_width")
        self.follower.add_views(self._main)
        self._folder_changed()
        self._open()
        self._compare_changed()
        self._ready = True
        if self._served:
            self._refresher = weak_periodic(self, RunsPage._tick, TICK_MS, RunsPage._refresh_failed)
        else:
            self.refresh()
            if can_schedule():  # a kernel: the table keeps itself current as served, on the kernel's loop
                self._refresher = weak_periodic(self, RunsPage._refresh_and_push, int(self.refresh_s * 1000),
                                                RunsPage._refresh_failed)

    # -- what the page shows ----------------------------------------------------------------------------------
    @param.depends("folder", watch=True)
    def _folder_changed(self) -> None:
        """Accept the typed folder when it lies inside the server's folders; otherwise say why and list without it."""
        text = self.folder.strip()
        self._added = None
        self._tell("folder", None)
        if text:
            try:
                self._added = resolve_run_path(text, self.roots)
            except (PermissionError, FileNotFoundError, ValueError) as err:  # ValueError: a NUL byte
                self._tell("folder", "danger", f"Folder not added: {md(err)}")
        self._changed()

    def _tell(self, topic: str, kind: str | None, text: str = "") -> None:
        """Show the page's message about ``topic`` (folder, run, stop) beside the others, or withdraw it (``kind``
        None); the notice takes the gravest kind of those shown. ``text`` is Markdown that quotes outside values
        through :func:`~lab.ui.text.md` or :func:`~lab.ui.text.code`."""
        if kind is None:
            if self._messages.pop(topic, None) is None:
                return
        else:
            self._messages[topic] = (kind, text)
        if not self._messages:
            self.notice.visible = False
            return
        kinds = [k for k, _ in self._messages.values()]
        self.say(next(k for k in ("danger", "warning", "info") if k in kinds),
                 "\n\n".join(t for _, t in self._messages.values()))

    def folders(self) -> list[Path]:
        """The folders listed: the runs folder, then the added one."""
        return [self.roots[0], *([self._added] if self._added is not None else [])]

    def _key(self, path: Path) -> str:
        if path not in self._keys:
            self._keys[path] = run_key(path, self.roots)
        return self._keys[path]

    @param.depends("compare", watch=True)
    def _compare_changed(self) -> None:
        """Compare the runs named by ``compare``: each must resolve inside the server's folders, as ``run``."""
        keys = list(dict.fromkeys(k.strip() for k in self.compare.split(",") if k.strip()))
        if self._compare_choice.value != keys:
            self._compare_choice.options = list(dict.fromkeys([*self._compare_choice.options, *keys]))
            self._compare_choice.value = keys
        self._tell("compare", None)
        chosen, refused = {}, []
        for key in keys:
            try:
                path = resolve_run_path(key, self.roots)
                if not is_run_folder(path):
                    raise FileNotFoundError(f"{key!r} is not a run folder")
            except (PermissionError, FileNotFoundError, ValueError) as err:
                refused.append(md(err))
            else:
                chosen[path] = key
        self.compared.choose(chosen)
        if refused:
            self._tell("compare", "danger", "Not compared: " + "; ".join(refused))
        self._changed()

    @param.depends("run", watch=True)
    def _open(self) -> None:
        """Follow the run named by ``run`` from its first record (or show nothing when it is empty)."""
        key = self.run.strip()
        self._path, self._opened, self._last_summary = None, None, None
        self._tell("run", None)
        self._tell("stop", None)
        self.follower.forget()  # watch-only jobs: forgetting stops nothing (and its last poll comes before clear)
        self.curves.clear()
        self._plots[:] = []
        self.details.clear()
        self.saved.open(None)
        self.sweep.clear()
        if key:
            try:
                path, kind = folder_kind(key, self.roots)
            except (PermissionError, FileNotFoundError, ValueError) as err:  # ValueError: a NUL byte
                self._tell("run", "danger", f"Run not opened: {md(err)}")
            else:
                if kind == "run":
                    self._path, self._opened, self._first = path, Followed(path), True
                    self.follower.follow(WatchedRun(path))
                    self.follower.poll()
                    self.saved.open(Run(path), saved={})  # the first scan lists them
                else:  # a group opens as the comparison of its runs; a sweep's with their rank views as well
                    paths = find_runs(path, self.roots)
                    if kind == "sweep":
                        self._tell("run", "info", self.sweep.start(key, len(paths), POOL.submit(sweep_rank, paths)))
                        if not self._served:
                            self._tell("run", "info", self.sweep.finish())
                    else:
                        self._tell("run", "info", f"Reproduction {md(key)}: its {len(paths)} runs compared; its "
                                                  "report is report.html in that folder")
                    self.compare = ",".join(self._key(p) for p in paths)
        self._syncing = True
        try:
            self._select_row()
        finally:
            self._syncing = False
        self._changed()

    # -- reading, off the event loop ----------------------------------------------------------------------------
    def _request(self) -> ScanRequest:
        return ScanRequest(self._generation, tuple(self.folders()), tuple(self.roots), self.stale_after_s,
                           self._opened, self._first, self.details.shown_figure,
                           self.compared.follows(), most=None if self.summaries else PAGE_ROWS)

    def _changed(self) -> None:
        """What the page shows changed: read it again now (in a test or a script) or at the next tick (served)."""
        self._generation += 1
        self._dirty = True
        if self._ready and not self._served:
            self.refresh()

    def refresh(self) -> bool:
        """Read the folders now, on this thread, and show what was read; returns whether the table changed (tests and
        scripts; a served page reads in a worker, :meth:`_tick`)."""
        changed = False
        while True:
            read = scan(self.catalog, self._request())
            changed = self._apply(read) or changed
            if not read.more:
                return changed

    def _tick(self) -> None:
        """Show a finished scan, and start the next one when the page changed or ``refresh_s`` passed."""
        if self.sweep.ready:
            self._tell("run", "info", self.sweep.finish())
            self.follower.push()
        if self._scan is not None:
            if not self._scan.done():
                return
            future, self._scan = self._scan, None
            # the next periodic scan waits at least SCAN_SHARE⁻¹ times as long as this one took: a folder of
            # thousands of runs takes a bounded share of the server's time, however many tabs show it
            self._due = max(self._due, time.monotonic() + (time.monotonic() - self._started) / SCAN_SHARE)
            self._apply(future.result())  # an exception goes to _refresh_failed
            self._tell("refresh", None)
            self.follower.push()  # a notebook's outputs get the raw Bokeh models' changes (served: nothing to do)
        if self._dirty or time.monotonic() >= self._due:
            self._dirty, self._started = False, time.monotonic()
            self._due = self._started + self.refresh_s
            self._scan = POOL.submit(scan, self.catalog, self._request())

    def _apply(self, read: Scan) -> bool:
        """Show what a scan read (dropped when the page changed since it was asked for); returns whether the table
        changed."""
        if read.generation != self._generation:
            self._dirty = True
            return False
        keys = read.keys
        before, self.summaries = self.summaries, dict(zip(keys, read.summaries, strict=True))
        self._keys.update(zip((s["path"] for s in read.summaries), keys, strict=True))
        changed = self._show_rows(read.rows)
        options = keys + [k for k in self._compare_choice.value if k not in keys]
        if self._compare_choice.options != options:
            self._compare_choice.options = options
        if self._added is not None and not read.partial and not any(
                s["path"] == self._added or self._added in s["path"].parents
                for s in read.summaries):  # listed from it: no resolving needed
            self._tell("folder", "info", f"No run folders in {code(self._added)} yet; the table shows them as they "
                                         "appear.")
        elif "folder" in self._messages and self._messages["folder"][0] == "info":
            self._tell("folder", None)
        if read.opened is not None:
            self._show_opened(read.opened, before)
        self._update_stop(self._summary())
        shown = self.compared.add(read.compared)
        if shown is not None:
            self.comparison.show(*shown)
        self._dirty = self._dirty or read.more  # a long file: the next chunk at once
        return changed

    # -- the table ----------------------------------------------------------------------------------------------
    def _show_rows(self, frame: pd.DataFrame) -> bool:
        """Replace the table's rows when any cell changed, keeping the opened run's row selected.

        Never ``Tabulator.patch``: in the browser a patch sets the table's data even while the table is still
        being built (a page opened on a busy machine), which fails there; a new value waits until it is built.
        """
        if frame.equals(self.table.value):
            return False
        self._syncing = True
        try:
            self.table.value = frame
            self._select_row()
        finally:
            self._syncing = False
        return True

    def _select_row(self) -> None:
        keys = list(self.table.value["run"])
        want = [keys.index(self.run)] if self.run in keys else []
        if self.table.selection != want:
            self.table.selection = want

    def _selected(self, event: param.parameterized.Event) -> None:
        """A row was clicked: open its run."""
        if self._syncing or not event.new:
            return
        keys = list(self.table.value["run"])
        if event.new[0] < len(keys):
            self.run = keys[event.new[0]]

    # -- the opened run ---------------------------------------------------------------------------------------
    def _summary(self) -> dict[str, Any] | None:
        """The opened run's summary as last read (None before its first scan)."""
        return None if self._path is None else self._last_summary

    def _show_opened(self, opened: Opened, before: dict[str, dict[str, Any]]) -> None:
        """The opened run's curves, header, config, checkpoints, saved snapshots and picture; follow it afresh when its
        metrics file was rewritten (a resumed run) or it came back to life after finishing."""
        if opened.path != self._path:
            return
        summary = self._last_summary = opened.summary
        old = before.get(self._key(self._path))
        revived = old is not None and old["state"] in FINISHED and summary["alive"]
        self._first = False
        self._opened = opened.records.follow
        if opened.records.rewritten or revived:
            self.curves.clear()
            self._plots[:] = []
            self.follower.follow(WatchedRun(self._path))
            self.follower.poll()
        if opened.records.records:
            self._new_records(opened.records.records)
        if opened.points is not None:
            self.saved.show_points(opened.points)
        self.saved.refresh(opened.saved)
        self.details.show(self._key(self._path), self._path, summary, opened.config_text, opened.checkpoints,
                          opened.figure)

    def _new_records(self, records: list[dict[str, Any]]) -> None:
        self.curves.extend(records)
        panes = self.curves.panes()
        shown = [p for row in self._plots for p in row]
        if panes != shown:
            self._plots[:] = [pn.Row(*panes[i:i + 2]) for i in range(0, len(panes), 2)]

    # -- stopping ---------------------------------------------------------------------------------------------
    def lab_job(self) -> Job | None:
        """The job of this server's manager that trains the opened run (None for a run written elsewhere)."""
        return None if self._path is None else job_for(self.manager.active(), self._path)

    def _stop_reason(self, summary: dict[str, Any] | None) -> str | None:
        """Why the opened run cannot be stopped from here (None when it can)."""
        if self._path is None:
            return "Select a run to stop it."
        if self.lab_job() is not None:
            return None
        if summary is None:
            return "Reading the run…"
        if not summary["alive"]:
            return f"This run has ended ({md(summary['state'], one_line=True)}); nothing to stop."
        return ("Watch-only: another process writes this run (a command-line or cluster run), so it is stopped "
                "where it runs. A `python -m lab` run also stops when a file named `STOP` appears in its folder.")

    def _update_stop(self, summary: dict[str, Any] | None) -> None:
        reason = self._stop_reason(summary)
        job = self.lab_job()
        sweep = job is not None and getattr(job, "runs", None)
        note = reason or ("Started by this lab: **Stop** ends it after the current step; its folder and last "
                          "checkpoint stay." + (" This run is a member of a sweep: the whole sweep stops."
                                                if sweep else ""))
        self._stop_button.disabled = reason is not None
        if self._stop_note.object != note:
            self._stop_note.object = note

    @param.depends("stop", watch=True)
    def _stop(self) -> None:
        """Stop the opened run when this server's manager trains it; refuse, saying why, otherwise."""
        reason = self._stop_reason(self._summary())
        job = self.lab_job()
        if reason is not None or job is None:
            self._tell("stop", "warning", f"Not stopped. {reason}")
            return
        # off the session's thread: a process job waits for its child (STOP file, then signals) for seconds
        threading.Thread(target=job.stop, name="lab-stop-run", daemon=True).start()
        self._tell("stop", "info", f"Stopping {code(job.run.id)} after its current step.")

    # -- polling ----------------------------------------------------------------------------------------------
    def poll(self) -> bool:
        """Pull the opened run's status, and read the folders again (tests call this; served, two periodic
        callbacks do)."""
        changed = self.follower.poll()
        return self.refresh() or changed

    def _refresh_and_push(self) -> None:
        self.refresh()
        self._tell("refresh", None)
        self.follower.push()

    def _refresh_failed(self, err: Exception) -> None:  # keep refreshing; say what failed
        log.error("refreshing the run table failed", exc_info=err)
        self._tell("refresh", "danger", f"Refreshing the table failed: {md(f'{type(err).__name__}: {err}')}")

    # -- layout -----------------------------------------------------------------------------------------------
    def _help(self) -> str:
        extra = ", ".join(code(r) for r in self.roots[1:]) or "none"
        return (f"Lists the run folders in the runs folder {code(self.roots[0])} and in a folder you add (a path "
                f"inside it or inside a folder of `LAB_RUN_DIRS`: {extra}; start the server with `LAB_RUN_DIRS` set, "
                f"paths separated by {code(os.pathsep)}, to read a "
                "cluster's mounted output folder). Sweep folders list their members. Click a row to open its run. "
                f"A running run without a heartbeat for {self.stale_after_s:.0f} s is marked stale.")

    def controls(self) -> pn.viewable.Viewable:
        folder = pn.widgets.TextInput.from_param(self.param.folder, name="Add a folder of runs",
                                                 placeholder="e.g. cluster/outputs or /mnt/cluster/outputs")
        return pn.Column(folder, self._compare_choice, pn.Row(self._stop_button), self._stop_note, self.follower,
                         self.notice,
                         markdown_pane(self._help(), margin=(5, 10), styles={"font-size": "smaller"}),
                         sizing_mode="stretch_width")

    def views(self) -> pn.viewable.Viewable:
        """The run table, then the opened run: header, curves, config and checkpoints."""
        return self._main
