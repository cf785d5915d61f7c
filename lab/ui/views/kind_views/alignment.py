"""``alignment`` snapshots replayed in the Alignment page's views."""

from __future__ import annotations

import numpy as np
import panel as pn

from lab.snapshots.kinds import ALIGNMENT
from lab.ui.views.live_alignment import AlignmentViews
from lab.ui.views.replays import register


class AlignmentReplay:
    """An ``alignment`` snapshot in the Alignment page's views (they draw no training points)."""

    def __init__(self) -> None:
        self.views = AlignmentViews()

    def panes(self) -> list[pn.viewable.Viewable]:
        return [pn.Column(*self.views.rows())]

    def show(self, snapshot: dict[str, np.ndarray], step: int, points: tuple[np.ndarray, np.ndarray]) -> None:
        self.views.show(snapshot)


register(ALIGNMENT, AlignmentReplay)
