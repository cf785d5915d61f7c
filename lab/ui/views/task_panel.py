"""A page's analysis in the background: a bounded child process, with its status line, progress bar and Cancel.

Every analysis a page starts (the Alignment page's untrained preview, a checkpoint under the three lenses) runs as a
:class:`~lab.jobs.bounded.BoundedTask`: apart from the server, under a memory and a time bound, so no session waits on
it and none can exhaust the server. A :class:`TaskPanel` shows one: "what … (done of total)", a progress bar, a
**Cancel** button, and, when it fails, why (the bound that ended it, or the child's error), as text. Its result is
handed to the page on the session's thread.

A browser session runs one such analysis at a time (:class:`SessionTasks`: its pages' panels share one), and the
server a bounded number (``LAB_PAGE_JOBS``). A preview (started with ``replace=True``) yields: new settings or any
other analysis of the session stop it; any other start while an analysis runs is refused, saying what runs.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import panel as pn

from lab.jobs.bounded import BoundedTask, Bounds, ServerBusy, TaskFailed
from lab.ui.follower import can_schedule, session_id, weak_periodic
from lab.ui.text import alert_pane, markdown_pane, md

__all__ = ["SessionTasks", "TaskPanel"]

TICK_MS = 250
"""How often a served page looks at its running analysis."""


class SessionTasks:
    """The analysis one browser session runs (at most one; its pages' :class:`TaskPanel` s share this)."""

    _sessions: weakref.WeakKeyDictionary[Any, SessionTasks] = weakref.WeakKeyDictionary()

    def __init__(self) -> None:
        self.running: TaskPanel | None = None

    @classmethod
    def of_session(cls) -> SessionTasks:
        """The served session's (one per browser session), or a new one outside a server (a notebook, a test)."""
        doc = pn.state.curdoc
        if doc is None or doc.session_context is None:
            return cls()
        if doc not in cls._sessions:
            cls._sessions[doc] = cls()
            pn.state.on_session_destroyed(lambda ctx, tasks=cls._sessions[doc]: tasks.cancel())
        return cls._sessions[doc]

    def cancel(self) -> None:
        """Cancel the session's running analysis (its browser has gone)."""
        if self.running is not None and self.running.task is not None:
            self.running.task.cancel()


class TaskPanel(pn.viewable.Viewer):
    """One kind of analysis of a page: start it, follow it, cancel it, and hand its result over.

    Args:
        idle: the status line before anything runs.
        session: the session's analyses (default: :meth:`SessionTasks.of_session`).
        bounds: the child's bounds (default: :meth:`~lab.jobs.bounded.Bounds.from_env`, read at each start).
    """

    def __init__(self, idle: str = "", session: SessionTasks | None = None, bounds: Bounds | None = None) -> None:
        self.session = session or SessionTasks.of_session()
        self.bounds = bounds
        self.task: BoundedTask | None = None
        self._what = ""
        self._on_result: Callable[[Any], None] | None = None
        self._on_failure: Callable[[TaskFailed], None] | None = None
        self._yields = False  # a preview, which stops for any newer analysis of the session
        self._ticker = None
        self.status = markdown_pane(idle, margin=(0, 10))
        self.bar = pn.indicators.Progress(value=None, max=100, visible=False, sizing_mode="stretch_width",
                                          height=12, margin=(0, 10))
        self.cancel_button = pn.widgets.Button(label="Cancel", visible=False, width=90, margin=(0, 10))
        self.cancel_button.on_click(lambda event: self.cancel())
        self.alert = alert_pane("", alert_type="danger", visible=False, margin=(5, 10))
        self._layout = pn.Column(self.status, pn.Row(self.bar, self.cancel_button), self.alert,
                                 sizing_mode="stretch_width")

    @property
    def busy(self) -> bool:
        """Whether this panel's analysis runs."""
        return self.task is not None and not self.task.done()

    def start(self, what: str, fn: Callable[..., Any], *args: Any, on_result: Callable[[Any], None],
              on_failure: Callable[[TaskFailed], None] | None = None, replace: bool = False,
              **kwargs: Any) -> bool:
        """Run ``fn(*args, progress=…, **kwargs)`` in a bounded child; ``on_result(value)`` on the session's thread.

        Args:
            what: what runs, as Markdown (outside values quoted with :func:`~lab.ui.text.md`): "Analysing … ".
            replace: a preview: it stops for newer settings or for any other analysis of the session.
            on_failure: called with the :class:`~lab.jobs.bounded.TaskFailed` when it fails (after the panel has
                shown it).

        Returns:
            Whether it started; else the panel says why (the session or the server runs enough already).
        """
        running = self.session.running
        if running is not None and running.busy:
            if running._yields:
                running._stop_for(what)
            else:
                self.fail(f"This session runs an analysis already ({running._what.strip()}): wait for it or "
                          "Cancel it first.")
                return False
        try:
            self.task = BoundedTask(fn, *args, bounds=self.bounds or Bounds.from_env(), **kwargs).start()
        except (ServerBusy, ValueError) as err:
            self.fail(f"Cannot start: {md(err)}")
            return False
        self.session.running = self
        self._what, self._on_result, self._on_failure, self._yields = what, on_result, on_failure, replace
        self.alert.visible = False
        self.status.object = f"{what} …"
        self.bar.value, self.bar.visible, self.cancel_button.visible = None, True, True
        if can_schedule() and self._ticker is None:
            self._ticker = weak_periodic(self, TaskPanel.poll, TICK_MS, TaskPanel._poll_failed)
        return True

    def poll(self) -> bool:
        """Show the progress; once ended, hand the result over or show the failure. Returns whether a result was
        handed over (a served page's periodic callback calls this; a notebook or a test may too)."""
        task = self.task
        if task is None:
            return False
        if not task.done():
            done, total = task.progress
            if total:
                self.bar.value = min(100, int(100 * done / total))
                self.status.object = f"{self._what}: {md(done)} of {md(total)} …"
            return False
        self._finish()
        self.task = None  # handed over once
        try:
            value = task.result()
        except TaskFailed as err:
            self.fail(f"{self._what.strip()}: {md(err)}")
            if self._on_failure is not None:
                self._on_failure(err)
            return False
        self.status.object = f"{self._what}: done in {task.elapsed:.1f} s."
        if self._on_result is not None:
            self._on_result(value)
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the analysis ends, then :meth:`poll` (a notebook or a test)."""
        if self.task is not None:
            self.task.wait(timeout)
        return self.poll()

    def first(self, start: Callable[[], None]) -> None:
        """Start a page's first analysis (``start``, which calls :meth:`start`) where it costs the page least:

        * served, once the browser has drawn the page (``pn.state.onload``): the child's work does not compete with
          the page's own first paint for the machine's cores;
        * in a notebook kernel, at once, and waited for: a notebook output is rendered once and then changed over the
          kernel's comm, and one rendered with empty figures and filled that way failed in BokehJS while drawing its
          legends (a ``RangeError`` reading the new columns); the first preview is then part of the first rendering;
        * elsewhere (a script, a test), at once.
        """
        if session_id() is not None:
            pn.state.onload(start)
            return
        start()
        if can_schedule():
            self.wait()

    def cancel(self) -> None:
        """Stop the analysis now (the Cancel button)."""
        if self.busy:
            self.task.cancel()
            self.status.object = f"{self._what}: cancelling …"

    def fail(self, text: str) -> None:
        """Show ``text`` (Markdown, outside values quoted) as the reason nothing was done."""
        self.alert.object, self.alert.visible = text, True
        self.status.object = "Nothing done."

    def _stop_for(self, what: str) -> None:
        """Stop this panel's preview for ``what`` (Markdown), quietly: it is moot, not failed."""
        self.task.cancel()
        self.task.wait(10)
        self._finish()
        self.task = None
        self.status.object = f"Stopped for: {what}."

    def _finish(self) -> None:
        self.bar.visible = self.cancel_button.visible = False
        if self.session.running is self:
            self.session.running = None
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None

    def _poll_failed(self, err: Exception) -> None:
        self.fail(f"The page could not show the analysis: {md(err)}")

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout
