"""Follow one job from a page: start it, poll it, hand new metrics and snapshots to the page's views.

Every page that trains uses one :class:`JobFollower`; it is the only place that reads a job. Its periodic callback
(status and metrics) runs in a ``panel serve`` session (the session's own thread) and in a Jupyter kernel (the
kernel's event loop) the same way, and after each poll that changed something it pushes the changes to notebook
outputs (a browser served by ``panel serve`` gets them through the session's websocket without help).

Snapshots of jobs in this process or its children are not polled: the job says when one lands
(:meth:`~lab.jobs.job.Job.listen`) and the follower draws it on the page's own thread at once (a job that trains
elsewhere, read from its run folder, is drawn at each poll). A page whose live view is wrapped in the follower's
:class:`FrameClock` (:meth:`JobFollower.pace`) hands the browser a snapshot only once it has drawn the last one while
it was on screen, and asks the job for the next one as it hands one over: the job builds the next snapshot while the
browser paints this one, so the frame rate is set by the slower of the two rather than by their sum, and at most one
snapshot waits, the newest (a hidden or scrolled-away view is sent nothing, and the job builds at most one more).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import panel as pn
import param
from panel.io import PeriodicCallback, push_notebook
from panel.io.notebook import block_comm
from panel.io.state import set_curdoc

from lab.config import ConfigError, ExperimentConfig
from lab.jobs.job import Job
from lab.jobs.manager import JobManager, ManagerBusy, get_manager
from lab.ui.views.frame_clock import FrameClock
from lab.ui.views.status import JobStatus

log = logging.getLogger(__name__)
SnapshotHandler = Callable[[dict[str, np.ndarray]], None]
MetricsHandler = Callable[[list[dict[str, Any]]], None]


def session_id() -> str | None:
    """The id of the browser session running this code (None in a notebook or a plain script)."""
    doc = pn.state.curdoc
    context = getattr(doc, "session_context", None) if doc is not None else None
    return getattr(context, "id", None)


class JobFollower(pn.viewable.Viewer):
    """Start and follow one job at a time; shows its status line, progress bar and alerts.

    Pages register what they draw with :meth:`on_snapshot` and :meth:`on_metrics`; handlers run on the thread
    that owns the page (never on the training thread) and only when something new arrived.

    Args:
        manager: the job manager that starts jobs (bounded, owned by the browser session).
        views: Panel objects whose notebook outputs get pushed after a poll that changed something.
    """

    period = param.Integer(default=1000, bounds=(50, 10_000), doc="milliseconds between polls")

    def __init__(self, manager: JobManager | None = None, views: Iterable[pn.viewable.Viewable] = (),
                 **params: Any) -> None:
        super().__init__(**params)
        self.manager = manager or get_manager()
        self.status = JobStatus()
        self.job: Job | None = None
        self.records: list[dict[str, Any]] = []  # every metric record of the followed run so far
        self.versions: dict[str, int] = {}  # newest snapshot version handed to the page, per kind
        self._views = [self.status, *views]
        self._snapshot_handlers: list[tuple[str, SnapshotHandler]] = []
        self._metrics_handlers: list[MetricsHandler] = []
        self._poll_handlers: list[Callable[[], None]] = []
        self._wanted: set[str] = set()
        self._cursor = 0
        self._callback = None
        self._finalizer: weakref.finalize | None = None
        self.clock: FrameClock | None = None  # paces the on-demand kinds when a page wraps its live view in it
        self._landing = False  # a draw of landed snapshots is scheduled on the page's thread

    # -- what the page draws ----------------------------------------------------------------------------------
    def on_snapshot(self, kind: str, handler: SnapshotHandler) -> None:
        """Call ``handler(payload)`` with each new snapshot of ``kind``."""
        self._snapshot_handlers.append((kind, handler))

    def on_metrics(self, handler: MetricsHandler) -> None:
        """Call ``handler(new_records)`` with the metric records that arrived since the last poll."""
        self._metrics_handlers.append(handler)

    def on_poll(self, handler: Callable[[], None]) -> None:
        """Call ``handler()`` at the end of every poll (about once a second while a job runs): for what a page
        refreshes less often than it draws frames."""
        self._poll_handlers.append(handler)

    def want(self, kind: str, on: bool = True) -> None:
        """Ask the job for snapshots of the on-demand ``kind`` (or stop asking): the next one each time the browser has
        drawn the last (with :meth:`pace`), or after every poll (without)."""
        (self._wanted.add if on else self._wanted.discard)(kind)
        if on:
            self._ask()

    def pace(self, view: pn.viewable.Viewable) -> FrameClock:
        """Wrap the live ``view`` in a :class:`FrameClock` that paces the wanted kinds by what the browser draws;
        the page lays out the clock where it would have put the view."""
        self.clock = FrameClock(view)
        self.clock.param.watch(lambda _: self._browser_drew(), "drawn")
        return self.clock

    def _browser_drew(self) -> None:
        """The browser painted the last snapshot sent: hand it the one that waits, or ask for one."""
        self._landed()
        self._ask()

    def add_views(self, *views: pn.viewable.Viewable) -> None:
        """More objects whose notebook outputs are pushed after a changing poll."""
        self._views.extend(views)

    # -- the job ----------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """Whether the followed job is alive (training, paused or queued)."""
        return self.job is not None and self.job.is_alive()

    def start(self, cfg: ExperimentConfig, **job_kwargs: Any) -> Job | None:
        """Start ``cfg`` in a thread job owned by this browser session and follow it.

        Returns the job, or None when it could not start (the manager is busy or the config invalid); the
        reason is shown in the status alert and nothing else changes.
        """
        return self._launch(lambda owner: self.manager.start_thread(cfg, owner=owner, **job_kwargs))

    def start_sweep(self, cfg: ExperimentConfig, values: dict[str, list[Any]], **job_kwargs: Any) -> Job | None:
        """Start a sweep of ``cfg`` over ``values`` (``{"model.alpha_min": [1.0, 0.8]}``) as one ensemble job
        (:class:`~lab.jobs.sweep_job.SweepJob`) and follow it; None when it could not start, as :meth:`start`."""
        return self._launch(lambda owner: self.manager.start_sweep((cfg, values), owner=owner, **job_kwargs))

    def start_lockstep(self, cfgs: Sequence[ExperimentConfig], **job_kwargs: Any) -> list[Job] | None:
        """Start ``cfgs`` in lockstep (:meth:`~lab.jobs.manager.JobManager.start_lockstep`) and follow the first;
        returns every job (the page follows the others), or None when they could not start, as :meth:`start`."""
        return self._launch(lambda owner: self.manager.start_lockstep(cfgs, owner=owner, **job_kwargs))

    def _launch(self, start: Callable[[str | None], Any]) -> Any:
        try:
            started = start(session_id())
        except (ManagerBusy, ConfigError, ValueError, FileNotFoundError) as err:  # nothing written: say why
            self.status.error(str(err), "warning" if isinstance(err, ManagerBusy) else "danger")
            return None
        self.follow(started[0] if isinstance(started, list) else started)
        return started

    def follow(self, job: Job) -> None:
        """Follow ``job`` from its first record; a job followed before is left running."""
        self.job = job
        self.records, self.versions, self._cursor = [], {}, 0
        self.status.clear()
        job.listen(_waker(self, job))
        # a page that is thrown away (a notebook cell run again) does not leave its job training
        if self._finalizer is not None:
            self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _stop_quietly, job)
        self._ensure_polling()

    def stop(self) -> None:
        """Ask the followed job to stop (its run folder stays on disk) without waiting for it: a run in the middle of
        a long evaluation ends it first, and no session waits meanwhile; the status line follows it to its end."""
        if self.job is not None:
            self.job.stop(timeout=0)
            self._ensure_polling()
            self.poll()

    def forget(self) -> None:
        """Stop the job and drop it: the page is back to no run."""
        self.stop()
        self.job = None
        self._stop_polling()
        self.status.show({"state": "ready", "step": 0})

    # -- polling ----------------------------------------------------------------------------------------------
    def _ensure_polling(self) -> None:
        if self._callback is None and can_schedule():
            self._callback = weak_periodic(self, JobFollower.poll, self.period, JobFollower._poll_failed)

    def _poll_failed(self, err: Exception) -> None:
        log.exception("polling the job failed")
        self.status.error(f"Following the job failed: {type(err).__name__}: {err}. The run goes on; its folder is "
                          "on disk.")

    def _stop_polling(self) -> None:
        if self._callback is not None:
            self._callback.stop()
            self._callback = None

    def poll(self) -> bool:
        """Pull status, new metrics and new snapshots from the job; returns whether anything changed."""
        job = self.job
        if job is None:
            return False
        changed = False
        # alive is read first: a job that ends while this poll reads it (its last records, its final status) is
        # polled once more, so what it wrote last is never missed
        alive = job.is_alive()
        status = job.status()
        self.status.show(status, run=job.run.id)
        new, self._cursor = job.metrics_since(self._cursor)
        if new:
            self.records.extend(new)
            for handler in self._metrics_handlers:
                handler(new)
            changed = True
        changed = self._draw_snapshots() or changed
        for poll_handler in self._poll_handlers:
            poll_handler()
        self._ask()
        if not alive:
            self._stop_polling()
        if changed:  # handlers change raw Bokeh models; Panel's own widgets and panes push themselves
            self.push()
        return changed

    def _draw_snapshots(self) -> bool:
        """Hand each kind's newest snapshot, if not handed yet, to its handlers; returns whether any was. While the
        browser has not drawn the last one sent (:meth:`pace`), they wait: only the newest is handed over then."""
        job, drawn = self.job, False
        if job is None or (self.clock is not None and not self.clock.ready):
            return False
        # one message to the browser per frame, every view's changes and then the clock's count: served, one unlocked
        # block; in a notebook, the comm's pushes held until push() sends them together
        with pn.io.unlocked(), block_comm():
            for kind, handler in self._snapshot_handlers:
                latest = job.latest(kind)
                if latest is not None and latest[0] != self.versions.get(kind):
                    self.versions[kind] = latest[0]
                    handler(latest[1])
                    drawn = True
            if drawn and self.clock is not None:
                self.clock.tick()  # after the views' changes: the browser answers once it has painted them
                self._ask(ahead=True)  # built while the browser paints
        return drawn

    def _landed(self) -> None:
        """On the page's thread: draw what landed since the last draw."""
        self._landing = False
        if self._draw_snapshots():
            self.push()

    def _ask(self, ahead: bool = False) -> None:
        """Ask the job for the next snapshot of each wanted kind: once the browser has drawn the last one (or when no
        browser paces them), or ``ahead``, as the last one is handed to the browser."""
        if self.job is not None and (ahead or self.clock is None or self.clock.ready):
            for kind in self._wanted:
                self.job.request(kind)

    @contextlib.contextmanager
    def drawing(self) -> Iterator[None]:
        """Draw what is not a snapshot of the job (a page's preview, an analysis's result) from a callback of the
        page: served, its changes go out when the callback returns; in a notebook, they are held and then pushed at
        once (raw Bokeh models are sent only when pushed)."""
        if session_id() is not None:
            yield
            return
        with block_comm():
            yield
        self.push()

    def push(self) -> None:
        """Send pending model changes to every notebook output showing these views (no-op when served)."""
        for view in self._views:
            obj = view.__panel__() if isinstance(view, pn.viewable.Viewer) else view
            push_notebook(obj)

    def __panel__(self) -> pn.viewable.Viewable:
        return self.status


def can_schedule() -> bool:
    """Whether a periodic callback can run here: in a served session, or on a running event loop (a kernel).

    Elsewhere (a plain script, a test) nothing would call it; the owner polls by hand with :meth:`JobFollower.poll`.
    """
    if session_id() is not None:
        return True
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def weak_periodic(owner: Any, call: Callable[[Any], Any], period_ms: int,
                  on_error: Callable[[Any, Exception], None]) -> PeriodicCallback:
    """Start a background periodic callback that calls ``call(owner)`` and holds ``owner`` only weakly: it ends once
    the owner (a page, a follower) is gone. An exception goes to ``on_error(owner, err)`` and the ticks go on — in a
    kernel one exception would otherwise end the task for good, silently. Background: a tick every few hundred ms
    would otherwise keep the page's busy indicator spinning."""
    ref = weakref.ref(owner)

    def tick() -> None:
        o = ref()
        if o is None:
            callback.stop()
            return
        try:
            call(o)
        except Exception as err:
            on_error(o, err)

    callback = PeriodicCallback(callback=tick, period=period_ms, background=True)
    callback.start()
    return callback


def _waker(follower: JobFollower, job: Job) -> Callable[[], None]:
    """What ``job`` calls, from its own thread, when a snapshot lands: schedule one draw on the follower's thread — the
    session's (served), or the kernel's event loop — unless one is pending. Holds the follower weakly; elsewhere (a
    script, a test) the owner's polls draw the snapshots."""
    ref = weakref.ref(follower)
    doc = pn.state.curdoc if session_id() is not None else None
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None

    def wake() -> None:
        f = ref()
        if f is None or f.job is not job or f._landing or (doc is None and loop is None):
            return
        f._landing = True
        try:
            if doc is not None:
                with set_curdoc(doc):  # scheduled on the session's loop, run under its lock as Panel's callbacks
                    pn.state.execute(f._landed, schedule=True)
            else:
                loop.call_soon_threadsafe(f._landed)
        except Exception:  # the session or kernel is gone: nobody draws
            f._landing = False

    return wake


def _stop_quietly(job: Job) -> None:
    if job.is_alive():
        job.stop(timeout=0)
