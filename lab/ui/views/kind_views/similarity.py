"""``similarity`` snapshots (every Playground job writes them) replayed as the Playground's layer-similarity view."""

from __future__ import annotations

import holoviews as hv
import numpy as np
import panel as pn

from lab.snapshots.kinds import SIMILARITY
from lab.ui.views.replays import register
from lab.viz.node_grid import similarity_heatmaps


class SimilarityReplay:
    """A ``similarity`` snapshot: the Euclidean distance and the linear CKA between every pair of layers, side by side,
    as the Playground's card draws them (they draw no training points)."""

    def __init__(self) -> None:
        self.pane = pn.pane.Bokeh()

    def panes(self) -> list[pn.viewable.Viewable]:
        return [self.pane]

    def show(self, snapshot: dict[str, np.ndarray], step: int, points: tuple[np.ndarray, np.ndarray]) -> None:
        self.pane.object = hv.render(similarity_heatmaps(snapshot["distance"], snapshot["cka"]), backend="bokeh")


register(SIMILARITY, SimilarityReplay)
