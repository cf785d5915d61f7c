"""The views of each kind of snapshot: the one that replays a run folder's saved snapshots, and the pages that draw it
live beside their own views.

:class:`~lab.ui.views.saved_snapshots.SavedSnapshots` (the Runs page) offers every kind registered here
(:data:`REPLAYS`) and draws the chosen step through its view; a notebook shows a snapshot of such a kind in the same
view (:func:`lab.ui.display.snapshot_view`); a page named in ``live_on`` (the Playground) lays the view out beside its
own, has its job build the kind's snapshots at the kind's cadence, and draws each one that lands.

A new live view is one module in :mod:`lab.ui.views.kind_views` (every module there is imported with this one), or
in another package as a plugin (entry-point groups ``residual_lab.kinds`` and ``residual_lab.views``,
:mod:`lab.plugins`): the kind, registered with its builder where every kind is (:func:`lab.snapshots.kinds.register`
with a :class:`~lab.snapshots.kinds.Kind` record), and its view (a class with ``panes()`` and ``show()``), registered
here against the kind's name (:func:`register`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
import panel as pn

from lab import plugins
from lab.snapshots.kinds import KINDS, Kind


class Replay(Protocol):
    """A view that draws snapshots of one kind."""

    def panes(self) -> list[pn.viewable.Viewable]:
        """What a page lays out for it."""

    def show(self, snapshot: dict[str, np.ndarray], step: int, points: tuple[np.ndarray, np.ndarray]) -> None:
        """Draw ``snapshot`` (checked against its kind's contract) of ``step``; ``points``: the run's training points
        ``(x [n, 2], y [n])``, for views that draw over them (empty where there are none)."""


REPLAYS: dict[str, Callable[[], Replay]] = {}
"""Kind → what makes its view (made when a snapshot of that kind is first shown: views cost)."""
LIVE_ON: dict[str, tuple[str, ...]] = {}
"""Kind → the pages (by title) that draw it live beside their own views."""


def register(kind: str, make: Callable[[], Replay], *, live_on: tuple[str, ...] = ()) -> None:
    """Draw ``kind``'s snapshots in the view ``make()`` returns: saved ones on the Runs page and in notebooks, live
    ones on the pages ``live_on``. The kind itself is registered where every kind is, below the pages
    (:func:`lab.snapshots.kinds.register`), so a training never imports a view.

    Args:
        kind: a registered kind's name.
        make: makes the view.
        live_on: titles of the pages that draw the kind live; the kind then needs a builder and a cadence.

    Raises:
        ValueError: ``kind`` is no registered kind of snapshot, has a view already, or is drawn live without a
            builder and a cadence.
    """
    if kind in REPLAYS or kind not in KINDS:
        raise ValueError(f"{kind!r} is not a snapshot kind without a view; kinds: {', '.join(KINDS)}")
    record = KINDS[kind]
    if live_on and (record.builder is None or record.cadence is None):
        raise ValueError(f"{kind!r} is drawn live on {', '.join(live_on)}: its kind needs a builder and a cadence")
    REPLAYS[kind] = make
    if live_on:
        LIVE_ON[kind] = tuple(live_on)


def live_kinds(page: str) -> list[Kind]:
    """The kinds that ``page`` (a page's title) draws live beside its own views, in registration order."""
    return [KINDS[k] for k, pages in LIVE_ON.items() if page in pages]


from lab.ui.views import kind_views  # noqa: E402,F401  (registers the lab's views; its modules import register)

plugins.load(plugins.VIEWS)  # the views of other packages' kinds
