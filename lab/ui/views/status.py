"""A job's status as a page shows it: a status line, a progress bar, the run's notes (what its training goes on
without: :mod:`lab.jobs.notes`) and an alert for errors and divergence.

A status comes from a run folder (its status.json, written by whoever ran it) and an error from an exception that
may quote what a user typed: both are shown as text (:mod:`lab.ui.text`), never as markup.
"""

from __future__ import annotations

from typing import Any

import panel as pn
import param

from lab.runfolder.layout import RunState
from lab.ui.text import alert_pane, clipped, code, markdown_pane, md

_ALERTS = {RunState.DIVERGED: "danger", RunState.FAILED: "danger", RunState.STOPPED: "warning"}


class JobStatus(pn.viewable.Viewer):
    """Status line + progress bar + notes + alert; :meth:`show` updates it from a status dict (pure param changes).

    Attributes:
        message: the status line's text. notes: the run's notes (a snapshot kind dropped), shown while it has
            some. alert: the alert pane (errors, divergence, a busy manager).
    """

    message = param.String(default="No run yet.")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._line = markdown_pane(self.message, margin=(0, 10), css_classes=["lab-status"])
        self._bar = pn.indicators.Progress(value=0, max=100, bar_color="primary", sizing_mode="stretch_width",
                                           height=12, margin=(0, 10))
        self.notes = alert_pane("", alert_type="warning", visible=False, margin=(5, 10))
        self.alert = alert_pane("", alert_type="danger", visible=False, margin=(5, 10))
        self._state: str | None = None  # the state last shown
        self._alert_state: str | None = None  # the state shown when a page's message went up (None: the status's)
        self._layout = pn.Column(self._line, self._bar, self.notes, self.alert, sizing_mode="stretch_width")

    def show(self, status: dict[str, Any], run: str | None = None) -> None:
        """Reflect ``status`` (a run's status.json) of the run folder called ``run``."""
        state = status.get("state", "unknown")
        self._state = state
        step, total = status.get("step") or 0, status.get("total_steps") or 0
        metrics = status.get("metrics") or {}
        acc = f" · test acc {metrics['test_acc']:.3f}" if "test_acc" in metrics else ""
        self.message = (f"**{md(state, one_line=True)}** · step {md(step)}" + (f" / {md(total)}" if total else "")
                        + acc + (f" · run {code(run)}" if run else ""))
        self._line.object = self.message
        self._bar.value = int(100 * step / total) if total else 0
        self._bar.bar_color = {RunState.DIVERGED: "danger", RunState.FAILED: "danger",
                               RunState.COMPLETED: "success"}.get(state, "primary")
        notes = status.get("notes")
        notes = [md(clipped(note, 600)) for note in notes] if isinstance(notes, list) else []  # as text, whatever
        self.notes.object = "\n\n".join(notes)
        self.notes.visible = bool(notes)
        if state in _ALERTS:
            self.error(str(status.get("message") or state), _ALERTS[state])
            self._alert_state = None
        elif self._alert_state is None or self._alert_state != state:
            self.alert.visible = False  # a page's message stays while the state it was about lasts

    def error(self, text: str, kind: str = "danger", state: str | None = None) -> None:
        """Show ``text`` in the alert, as text (the server keeps running; nothing is lost). It stays up while the
        job is in the state it is about (a refused resume of a paused job: until the job runs again).

        Args:
            text: plain text, not Markdown: a run's message or an exception's, which may hold anything.
            kind: the alert's kind (danger, warning, info).
            state: the job's state the text is about; default the one the status line shows now (which may lag
                the job's own by a poll).
        """
        self.alert.alert_type = kind
        self.alert.object = md(text)
        self.alert.visible = True
        self._alert_state = self._state if state is None else state

    def clear(self) -> None:
        self.alert.visible = False

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout
