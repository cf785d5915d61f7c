"""What every page that trains with Start / pause, One step and Reset shares: those buttons and what they do to the
page's jobs, the warning when no job slot is free, the settings sidebar and the download buttons.

A page says what it trains (:meth:`TrainingPage._start`, :meth:`TrainingPage._rebuild`), what it draws, and what
it exports (:meth:`TrainingPage.exports`); everything else about its buttons lives here once.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import panel as pn
import param
import yaml

from lab.config import ExperimentConfig, to_dict
from lab.jobs.job import Job
from lab.jobs.manager import JobManager, ManagerBusy
from lab.runfolder.layout import RunState
from lab.ui.follower import JobFollower
from lab.ui.pages.knobs import groups, training_names
from lab.ui.pages.page import Page

Export = tuple[str, Callable[[], io.BytesIO], str]
"""One download button: its label, the function that writes the file, and the file's name."""

BUTTONS: dict[str, dict[str, Any]] = {"play": {"color": "primary", "width": 110}, "step": {"width": 90},
                                      "reset": {"width": 80}}
"""How each action's button looks in the sidebar."""


class TrainingPage(Page):
    """Base of a page that trains one job, or several in lockstep, from its settings.

    **Start / pause** starts the page's run (:meth:`_start`), pauses it, or resumes it; **One step** starts it
    paused if need be and trains one step; **Reset** stops it (its folder stays on disk) and draws a fresh,
    untrained model (:meth:`_rebuild`). Every action applies to all of the page's running jobs
    (:attr:`followers`). A paused job holds no job slot, so resuming or stepping it can find every slot taken: the
    page then shows the manager's warning (which names the jobs holding them) and its jobs stay paused.

    Subclasses implement :meth:`config`, :meth:`_start`, :meth:`_rebuild` and :meth:`views`, and list their
    downloads in :meth:`exports`.
    """

    play = param.Event(label="Start / pause")
    step = param.Event(label="One step")
    reset = param.Event(label="Reset")

    actions: ClassVar[tuple[str, ...]] = ("play", "step", "reset")
    """The action buttons of the sidebar, in order."""
    changed_note: ClassVar[str] = ("Settings changed. **Reset** to train with them (this stops the current run; its "
                                   "folder stays on disk).")
    """What the notice says when a training setting changes while the page's run trains."""
    open_groups: ClassVar[tuple[int, ...]] = (1, 3)
    """The settings groups open when the page appears (indices into the knob table's groups)."""

    def __init__(self, manager: JobManager | None = None, **params: Any) -> None:
        super().__init__(manager, **params)
        self.param.watch(self._training_changed, list(training_names(self.knobs)))

    # -- what a page provides ---------------------------------------------------------------------------------
    def config(self) -> ExperimentConfig:
        """The experiment the current settings describe (raises ConfigError with the reason)."""
        raise NotImplementedError

    def _start(self, paused: bool) -> bool:
        """Start the page's run (``paused``: before its first step); returns whether it started. A run that
        cannot start says why in the page's status."""
        raise NotImplementedError

    def _rebuild(self) -> None:
        """Draw an untrained model from the current settings (the page's state before any run)."""
        raise NotImplementedError

    def exports(self) -> list[Export]:
        """The page's download buttons, in order."""
        return []

    @property
    def followers(self) -> tuple[JobFollower, ...]:
        """The followers of the page's jobs; the first is ``follower``, whose job says whether the page's run is
        paused."""
        return (self.follower,)

    def _training_changed(self, *events: param.parameterized.Event) -> None:
        """A training setting changed: the untrained model is drawn again (once for a burst of changes), unless a
        run trains, which keeps its settings until **Reset**."""
        if self.follower.running:
            self.say("warning", self.changed_note)
            return
        self.later(self._rebuild)

    # -- actions ----------------------------------------------------------------------------------------------
    def _jobs(self) -> list[Job]:
        """The page's jobs that are alive (training, paused or queued)."""
        return [f.job for f in self.followers if f.running]

    @param.depends("play", watch=True)
    def _play(self) -> None:
        if not self.follower.running:
            self._start(paused=False)
            return
        paused = self.job.status().get("state") == RunState.PAUSED
        try:
            for job in self._jobs():
                job.resume() if paused else job.pause()
        except ManagerBusy as err:  # a paused job holds no slot: other runs took them meanwhile
            self._busy(err)

    @param.depends("step", watch=True)
    def _one_step(self) -> None:
        if not self.follower.running and not self._start(paused=True):
            return
        try:
            for job in self._jobs():
                job.step(1)
        except ManagerBusy as err:
            self._busy(err)

    def _busy(self, err: ManagerBusy) -> None:
        """The runs stay paused: no slot is free to train them (a job that did resume before another could not is
        paused again, so jobs in lockstep stay together)."""
        for job in self._jobs():
            if job.status().get("state") != RunState.PAUSED:
                job.pause()
        self.follower.status.error(str(err), "warning", state=RunState.PAUSED)

    @param.depends("reset", watch=True)
    def _reset(self) -> None:
        for follower in reversed(self.followers):  # jobs that follow the first one stop before it
            follower.forget()
        self.later(self._rebuild)

    def poll(self) -> bool:
        """Pull what is new from every job of the page and redraw it."""
        changed = False
        for follower in self.followers:
            changed = follower.poll() or changed
        return changed

    # -- export -----------------------------------------------------------------------------------------------
    def config_yaml(self) -> io.BytesIO:
        """The experiment of the current settings, as the YAML ``python -m lab train`` reads."""
        return io.BytesIO(yaml.safe_dump(to_dict(self.config()), sort_keys=False).encode())

    @staticmethod
    def npz(arrays: Mapping[str, np.ndarray]) -> io.BytesIO:
        """``arrays`` as one compressed npz file."""
        out = io.BytesIO()
        np.savez_compressed(out, **arrays)
        out.seek(0)
        return out

    def _downloads(self) -> pn.viewable.Viewable:
        return pn.Row(*[pn.widgets.FileDownload(callback=cb, filename=name, label=label, color="light", embed=False,
                                                width=120) for label, cb, name in self.exports()])

    # -- layout -----------------------------------------------------------------------------------------------
    def _messages(self) -> list[pn.viewable.Viewable]:
        """What the sidebar shows between the buttons and the settings: each job's status, then the notice."""
        return [*self.followers, self.notice]

    def _group_parameters(self, group: str, names: list[str]) -> list[str]:
        """The parameters the sidebar shows in settings ``group`` (the knobs of that group)."""
        return names

    def controls(self) -> pn.viewable.Viewable:
        """Buttons, status and the settings by group (the served page's sidebar)."""
        buttons = pn.Row(*[pn.widgets.Button.from_param(self.param[name], **BUTTONS[name]) for name in self.actions])
        # a slider's label rounds to two decimals by default: a learning rate of 0.002 would read "0"
        numbers = {n: {"format": "0.[00000]"} for n, p in self.param.objects().items()
                   if isinstance(p, param.Number) and not isinstance(p, param.Integer)}
        sections = [(g, pn.Param(self, parameters=(shown := self._group_parameters(g, names)), show_name=False,
                                 widgets={n: numbers[n] for n in shown if n in numbers}))
                    for g, names in groups(self.knobs).items()]
        return pn.Column(buttons, *self._messages(),
                         pn.Accordion(*sections, active=list(self.open_groups), sizing_mode="stretch_width"),
                         *self._cards(), sizing_mode="stretch_width")

    def _cards(self) -> list[pn.viewable.Viewable]:
        """What the sidebar shows below the settings (a page's checkpoint source)."""
        return []
