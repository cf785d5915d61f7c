"""The replay view of each kind of frame a run folder keeps: the live view that drew it, fed one saved frame.

:class:`~lab.ui.views.saved_snapshots.SavedSnapshots` offers every kind registered here (:data:`REPLAYS`) and draws the
chosen step through it. A new kind's replay is one class with ``panes()`` and ``show()`` and one :func:`register`
call; what the kind is and what its frames hold is :mod:`lab.jobs.kinds`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
import panel as pn

from lab.jobs.kinds import ALIGNMENT, KINDS, NODES
from lab.ui.views.live_alignment import AlignmentViews
from lab.ui.views.live_grid import LiveDecision, LiveGrid


class Replay(Protocol):
    """A view that draws saved frames of one kind."""

    def panes(self) -> list[pn.viewable.Viewable]:
        """What the Runs page lays out for it."""

    def show(self, frame: dict[str, np.ndarray], step: int, points: tuple[np.ndarray, np.ndarray]) -> None:
        """Draw ``frame`` (checked against its kind's contract) of ``step``; ``points``: the run's training points
        ``(x [n, 2], y [n])``, for views that draw over them."""


class NodesReplay:
    """``nodes`` frames in the Playground's node grid and decision map, over the run's training points."""

    def __init__(self) -> None:
        self.grid, self.decision = LiveGrid(), LiveDecision()

    def panes(self) -> list[pn.viewable.Viewable]:
        return [self.grid.pane, self.decision.pane]

    def show(self, frame: dict[str, np.ndarray], step: int, points: tuple[np.ndarray, np.ndarray]) -> None:
        L, H = frame["maps"].shape[:2]
        self.grid.show(frame, layers=(0, L), nodes=(0, H), normalize="tile", points=points)
        self.decision.show(frame["decision"], step, *points, _scalar(frame.get("limit"), 1.0))


class AlignmentReplay:
    """``alignment`` frames in the Alignment page's views."""

    def __init__(self) -> None:
        self.views = AlignmentViews()

    def panes(self) -> list[pn.viewable.Viewable]:
        return [pn.Column(*self.views.rows())]

    def show(self, frame: dict[str, np.ndarray], step: int, points: tuple[np.ndarray, np.ndarray]) -> None:
        self.views.show(frame)


REPLAYS: dict[str, Callable[[], Replay]] = {}
"""Kind → what makes its replay view (made when a run's frames of that kind are first shown: views cost)."""


def register(kind: str, make: Callable[[], Replay]) -> None:
    """Replay ``kind``'s saved frames in the view ``make()`` returns.

    Raises:
        ValueError: ``kind`` is no registered kind of frame, or has a replay already.
    """
    if kind not in KINDS or kind in REPLAYS:
        raise ValueError(f"{kind!r} is not a frame kind without a replay view; kinds: {', '.join(KINDS)}")
    REPLAYS[kind] = make


register(NODES, NodesReplay)
register(ALIGNMENT, AlignmentReplay)


def _scalar(value: object, default: float) -> float:
    """A frame's one-number entry (``limit``), or ``default`` when it is missing or not one finite number."""
    array = np.asarray(value if value is not None else default)
    if array.size != 1 or array.dtype.kind not in "biuf" or not np.isfinite(array).all():
        return default
    return float(array.reshape(()))
