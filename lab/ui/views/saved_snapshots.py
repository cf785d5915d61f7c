"""A run's saved snapshots, read-only: each kind its folder holds, replayed in the view that drew it live.

A run trained by a page (or by ``python -m lab train --snapshot-every N``) keeps snapshots under ``snapshots/``
(``<kind>-<step>.npz``, :meth:`~lab.runs.store.Run.load_snapshot`). Opened on the Runs page, they are replayed with a
step slider in the view each kind registers (:mod:`lab.ui.views.replays`): ``nodes`` snapshots in the Playground's
node grid and decision map (over the run's training points, rebuilt from its config by whoever opens the run:
:meth:`SavedSnapshots.show_points`), ``alignment`` snapshots in the Alignment views. Nothing is trained and nothing
is written. A snapshot comes from a run folder, so it is checked before it is drawn: read through
:func:`~lab.runfolder.entries.read_npz` (whose checks bound what loading it costs), then against its kind's contract
(:func:`~lab.snapshots.kinds.check_snapshot`); a snapshot that cannot be read or drawn leaves the one on screen and says
why. On a served page given an executor, the reading and checking run in its worker thread, not on the event loop
every session shares, and only the drawing of a checked snapshot comes back to the session's loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Executor, Future

import numpy as np
import panel as pn

from lab.runs.store import Run
from lab.snapshots.kinds import KINDS, NODES, SnapshotError, check_snapshot
from lab.snapshots.snapshot import Snapshot, load_saved
from lab.ui.text import markdown_pane, md
from lab.ui.views.replays import REPLAYS, Replay

log = logging.getLogger(__name__)


class SavedSnapshots:
    """The saved snapshots of one run: a chooser of kind, a step slider and the kind's view.

    Args:
        executor: where a served page reads and checks snapshots (None: on the caller's thread).

    Attributes:
        layout: what a page shows (hidden while the run has no snapshot of a kind with a replay view).
        views: each kind's replay view (:mod:`lab.ui.views.replays`), made when that kind is first shown.
    """

    def __init__(self, executor: Executor | None = None) -> None:
        self._executor = executor
        self._asked: tuple[Run, str, int] | None = None  # the newest snapshot a draw asked for
        self.run: Run | None = None
        self._saved: dict[str, list[int]] = {}  # the steps of each kind on disk, as last listed
        self._unseen = False  # a run was opened whose snapshots have not been drawn yet
        self.kind = pn.widgets.Select(label="Saved snapshots", options={}, width=420)
        self.step = pn.widgets.DiscreteSlider(label="Step", options=[0], value=0, width=420)
        self.views: dict[str, Replay] = {}  # each kind's replay view, made when first shown (views cost)
        self.title = markdown_pane("", margin=(0, 10))
        self.problem = markdown_pane("", margin=(0, 10), visible=False)
        self._body = pn.Column(sizing_mode="stretch_width")
        self._points: tuple[np.ndarray, np.ndarray] = (np.zeros((0, 2), np.float32), np.zeros(0, np.int64))
        self.layout = pn.Column(self.title, pn.Row(self.kind, self.step), self.problem, self._body,
                                sizing_mode="stretch_width", visible=False)
        self.kind.param.watch(lambda _: self._kind_changed(), "value")
        self.step.param.watch(lambda _: self.draw(), "value")

    def open(self, run: Run | None, saved: dict[str, list[int]] | None = None) -> None:
        """Replay ``run``'s snapshots (None: show nothing); ``saved``: the steps of each kind on disk (read now when
        not given)."""
        self.run, self._saved, self._unseen = run, {}, True
        self._points = (np.zeros((0, 2), np.float32), np.zeros(0, np.int64))
        self.kind.options = {}
        self.problem.visible = False
        self.refresh(saved)

    def show_points(self, points: tuple[np.ndarray, np.ndarray]) -> None:
        """Draw the node maps over the run's training points ``(x [n, 2], y [n])`` from now on."""
        self._points = points
        if self.kind.value == NODES and self.layout.visible:
            self.draw()

    def refresh(self, saved: dict[str, list[int]] | None = None) -> None:
        """Offer the kinds and steps on disk now (``saved``: each kind's steps, read now when not given): the slider
        grows while the run writes snapshots, and stays on the newest when it was there; the first snapshots found
        of a run just opened draw its newest."""
        if saved is None:
            saved = {} if self.run is None else {k: self.run.snapshot_versions(k) for k in REPLAYS}
        self._saved = {k: v for k, v in saved.items() if k in REPLAYS and v}
        kinds = {KINDS[k].title: k for k in self._saved}
        self.layout.visible = bool(kinds)
        opened, self._unseen = self._unseen and bool(kinds), self._unseen and not kinds
        if kinds != self.kind.options:
            self.kind.options = kinds
            if self.kind.value not in kinds.values() and kinds:
                self.kind.value = next(iter(kinds.values()))  # draws it (_kind_changed)
                return
        if kinds:
            self._steps(self._saved[self.kind.value], opened=opened)

    def _kind_changed(self) -> None:
        kind = self.kind.value
        if self.run is not None and kind in self._saved:  # drawn before its panes are laid out: they arrive whole
            self._steps(self._saved[kind], opened=True)
        self._body[:] = self._view(kind).panes() if kind in REPLAYS else []

    def _steps(self, versions: list[int], opened: bool = False) -> None:
        """Offer the steps ``versions`` of the chosen kind on the slider: at the newest when it was there, or when
        this run or kind was just ``opened``, whose snapshot is then drawn even where the slider stays (another
        run's snapshots may sit at the same steps). The slider's watcher draws a step it moves to."""
        if not versions:
            return
        value = self.step.value
        if opened or value == self.step.options[-1] or value not in versions:
            value = versions[-1]
        moved = value != self.step.value
        self.step.param.update(options=versions, value=value)  # together: the watcher sees the final step once
        if opened and not moved:
            self.draw()

    def draw(self) -> None:
        """Draw the chosen step's snapshot in its kind's view, or say why it cannot be (the one on screen stays)."""
        kind, run = self.kind.value, self.run
        if run is None or kind not in REPLAYS:
            return
        step = int(self.step.value)
        doc = pn.state.curdoc
        if self._executor is None or doc is None or doc.session_context is None:
            self._show(run, kind, step, lambda: read_checked(run, kind, step))
            return
        asked = self._asked = (run, kind, step)

        def read(future: Future) -> None:  # in the worker: back to the session's loop, where the view is drawn
            doc.add_next_tick_callback(lambda: self._show(*asked, future.result) if asked == self._asked else None)

        self._executor.submit(read_checked, run, kind, step).add_done_callback(read)

    def _show(self, run: Run, kind: str, step: int, read: Callable[[], Snapshot | None]) -> None:
        """Draw the snapshot ``read()`` gives (None: gone meanwhile), or say why it cannot be."""
        try:
            snapshot = read()
            if snapshot is None:
                return
            self._view(kind).show(snapshot, step, self._points)
        except (OSError, SnapshotError) as err:
            self._say(f"The snapshot of step {step} is not drawn: {md(err)}")
            return
        except (KeyError, IndexError, ValueError, TypeError) as err:  # arrays that do not fit one another
            log.warning("a saved %s snapshot of %s could not be drawn", kind, run.path, exc_info=err)
            self._say(f"The snapshot of step {step} is not drawn: its arrays do not fit its view "
                      f"({md(f'{type(err).__name__}: {err}')})")
            return
        self.problem.visible = False
        self.title.object = f"**{KINDS[kind].title}** at step {step}, from `snapshots/` (read-only)"

    def _view(self, kind: str) -> Replay:
        """``kind``'s replay view, made on first use."""
        if kind not in self.views:
            self.views[kind] = REPLAYS[kind]()
        return self.views[kind]

    def _say(self, text: str) -> None:
        self.problem.object, self.problem.visible = text, True



def read_checked(run: Run, kind: str, step: int) -> Snapshot | None:
    """``run``'s saved ``kind`` snapshot of ``step`` in float32, checked against the run's own config (its sizes)
    before any work is done with it; None when it is gone.

    Raises:
        OSError, SnapshotError: it cannot be read, or does not fit its kind or its run.
    """
    loaded = load_saved(run, kind, step)
    if loaded is None:
        return None
    snapshot = loaded[1]
    check_snapshot(kind, snapshot, run.read_config().get("model"))
    return snapshot
