"""An opened sweep's rank views on the Runs page: the Rank page's views of its members' last checkpoints, from a
snapshot a worker builds (reading K checkpoints and probing them takes seconds; the session never waits for it)."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import panel as pn

from lab.ui.text import code, md
from lab.ui.views.live_rank import RankViews


class SweepRank:
    """The rank views of one sweep at a time.

    Attributes:
        views: the Rank page's views (made when first shown: their figures cost a page that shows none).
        layout: what the page lays out (hidden until a sweep's views are shown).
    """

    def __init__(self) -> None:
        self.views: RankViews | None = None
        self.layout = pn.Column(sizing_mode="stretch_width", visible=False)
        self._pending: tuple[str, int, Future] | None = None

    def clear(self) -> None:
        """Show none; a snapshot still being built is dropped."""
        self.layout.visible = False
        self._pending = None

    def start(self, name: str, members: int, snapshot: Future) -> str:
        """Wait for the sweep ``name``'s ``snapshot`` (``(rank snapshot, members left out)``, from a worker); returns
        what to tell the user meanwhile."""
        self._pending = (name, members, snapshot)
        return (f"{code(name)} is a sweep: its {members} members are compared above; reading their last checkpoints "
                "for the rank views…")

    @property
    def ready(self) -> bool:
        """Whether a started snapshot is built (:meth:`finish` shows it)."""
        return self._pending is not None and self._pending[2].done()

    def finish(self) -> str:
        """Show the started snapshot (waiting for it when it is not built yet), or say why there are no views; returns
        what to tell the user."""
        name, members, future = self._pending
        self._pending = None
        words = f"{code(name)} is a sweep: its {members} members are compared above"
        try:
            snapshot, left_out = future.result()
        except (ValueError, OSError, RuntimeError) as err:  # not residual MLPs, a checkpoint unreadable, a bound
            return f"{words}; no rank views: {md(err)}"
        self.show(snapshot)
        missing = f" ({len(left_out)} left out: {'; '.join(md(m) for m in left_out)})" if left_out else ""
        return f"{words}, with the rank views of their last checkpoints{missing}."

    def show(self, snapshot: dict[str, np.ndarray]) -> None:
        """Draw one rank ``snapshot`` (nothing over training: one snapshot has no time axis)."""
        if self.views is None:
            self.views = RankViews()
            for name in ("rank_time", "probe_time"):
                self.views.panes[name].visible = False
            self.layout[:] = [self.views.layout]
        self.views.clear()
        self.views.show(snapshot)
        self.layout.visible = True
