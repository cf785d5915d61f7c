"""What every page of the lab shares: settings from a knob table, a notice, one job follower, and one layout that
is the served page's sidebar and main area or, as a notebook cell's value, the whole page."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, ClassVar

import panel as pn

from lab.jobs.job import Job
from lab.jobs.manager import JobManager
from lab.ui.follower import JobFollower
from lab.ui.pages.knobs import Knob, apply_url_values, clamp_link
from lab.ui.text import alert_pane
from lab.ui.views.task_panel import SessionTasks


class Page(pn.viewable.Viewer):
    """Base of the lab's pages. Subclasses declare their parameters from ``knobs``
    (:func:`~lab.ui.pages.knobs.knob_class`) and implement :meth:`controls` and :meth:`views`.

    Attributes:
        follower: starts and follows the page's job (status line, progress bar, alerts).
        notice: a message about the page's settings (URL values out of range).
        tasks: the analyses of the page's session (one at a time: its panels share this).
    """

    title: ClassVar[str] = ""
    knobs: ClassVar[dict[str, Knob]] = {}
    link_limits: ClassVar[dict[str, float]] = {}
    """The most a link (the URL's query) may ask of each size: what the page computes at once stays within a few
    seconds whatever a link says (:meth:`clamp_link`)."""

    def __init__(self, manager: JobManager | None = None, **params: Any) -> None:
        super().__init__(**params)
        self.notice = alert_pane("", alert_type="info", visible=False, margin=(5, 10))
        self.follower = JobFollower(manager, views=[self.notice])
        self.tasks = SessionTasks.of_session()
        self._pending: set[str] = set()  # names of functions waiting for the next tick (:meth:`later`)
        self._url_notices: dict[str, str] = {}  # what the URL asked that was not used as asked (:meth:`_say_url`)

    @property
    def url_parameters(self) -> tuple[str, ...]:
        """The settings the served page keeps in its URL query."""
        return tuple(self.knobs)

    @property
    def job(self) -> Job | None:
        """The job this page follows (None before the first run)."""
        return self.follower.job

    def say(self, kind: str, text: str) -> None:
        """Show ``text`` in the notice (``kind``: info, warning or danger).

        ``text`` is Markdown: whatever it quotes from a run folder, the URL or a typed field goes in through
        :func:`~lab.ui.text.md` or :func:`~lab.ui.text.code`.
        """
        self.notice.object, self.notice.alert_type, self.notice.visible = text, kind, True

    def apply_url(self, values: dict[str, Any]) -> None:
        """Apply settings from the URL query; a refused value is replaced by the nearest allowed one, with a
        notice naming the field, the allowed range and the value used."""
        notices = apply_url_values(self, values)
        if not notices:
            return
        self._say_url(notices)
        if pn.state.location is not None:  # the address bar shows the values in use
            used = {n: self.param[n].serialize(getattr(self, n)) for n in notices}
            pn.state.location.update_query(**{n: v if isinstance(v, str) else json.dumps(v) for n, v in used.items()})

    def clamp_link(self, query: dict[str, Any]) -> dict[str, Any]:
        """The sizes of ``query`` (the URL's, before it is applied) above :attr:`link_limits`, lowered to them; the
        notice says what was lowered."""
        lowered, notices = clamp_link(query, self.link_limits)
        if notices:
            self._say_url(notices)
        return lowered

    def _say_url(self, notices: dict[str, str]) -> None:
        """Say what the URL asked that the page does not use as it was: every such setting, in one notice."""
        self._url_notices.update(notices)
        self.say("warning", "Some URL settings were out of range:\n\n" +
                 "\n".join(f"- {n}" for n in self._url_notices.values()))

    def later(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the session's next tick, once for any number of calls before it (right away in a notebook
        or a test). A slider dragged across ten values sends ten changes; a costly rebuild then runs once."""
        doc = pn.state.curdoc
        if doc is None or doc.session_context is None:
            fn()
            return
        if fn.__name__ in self._pending:
            return
        self._pending.add(fn.__name__)

        def run() -> None:
            self._pending.discard(fn.__name__)
            fn()

        doc.add_next_tick_callback(run)

    def poll(self) -> bool:
        """Pull what is new from the job and redraw it (the periodic callback does this; tests may too)."""
        return self.follower.poll()

    def controls(self) -> pn.viewable.Viewable:
        """Buttons, status and settings: the served page's sidebar."""
        raise NotImplementedError

    def views(self) -> pn.viewable.Viewable:
        """Everything the page draws: the served page's main area (built once; updated in place)."""
        raise NotImplementedError

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Row(pn.Column(self.controls(), width=330), self.views())
