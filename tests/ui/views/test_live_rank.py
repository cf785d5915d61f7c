"""The rank views' two scatter plots: probe accuracy against α_min and against the final layer's rank."""

import numpy as np
from bokeh.models import HoverTool

from lab.ui.views.live_rank import RankViews


def _snapshot() -> dict[str, np.ndarray]:
    """Three members, two layers each; the last member diverged."""
    return {"alpha_min": np.array([1.0, 0.7, 0.4]), "member_names": np.array(["a", "b", "c"]),
            "diverged": np.array([False, False, True]), "alphas": np.array([[1.0, 1.0], [1.0, 0.7], [1.0, 0.4]]),
            "effective_rank": np.array([[9.0, 6.0], [8.0, 4.0], [7.0, 2.0]]),
            "eq6_entropy": np.array([[2.0, 1.5], [1.9, 1.2], [1.8, 0.5]]),
            "probe_acc": np.array([[0.9, 0.8], [0.9, 0.6], [0.9, 0.1]]),
            "pearson_r_effective_rank": np.float32(0.5), "pearson_r_eq6_entropy": np.float32(np.nan)}


def test_each_scatter_plot_draws_every_live_member_once_against_its_own_measure():
    views = RankViews()
    views.snapshot = _snapshot()
    views._scatter()
    assert list(views.points.data["alpha_min"]) == [1.0, 0.7] and list(views.points.data["rank"]) == [6.0, 4.0]
    assert list(views.points.data["probe"]) == [0.8, 0.6]  # the final layer's; the diverged member left out
    for fig, x, label in ((views.probe_alpha, "alpha_min", "α_min"), (views.rank_probe, "rank", "final-layer rank")):
        (dots,) = fig.renderers
        assert dots.data_source is views.points and (dots.glyph.x, dots.glyph.y) == (x, "probe")
        assert fig.xaxis.axis_label == label and fig.yaxis.axis_label == "final-layer probe accuracy"
        assert fig.legend.title == "α_min" and fig.legend.items[0].label.field == "label"
        assert ("α_min", "@alpha_min") in fig.select_one(HoverTool).tooltips
        lo, hi = fig.y_range.start, fig.y_range.end
        assert lo < 0.6 and hi > 0.8  # fitted to the dots drawn
    assert views.probe_alpha.title.text == "Probe accuracy against α_min"
    assert views.rank_probe.title.text == "Rank vs probe accuracy: Pearson r 0.500"
    assert views.rank_probe.x_range.start < 4.0 and views.rank_probe.x_range.end > 6.0


def test_the_rank_measure_moves_the_rank_plot_and_leaves_the_other():
    views = RankViews()
    views.snapshot = _snapshot()
    views._scatter()
    before = (views.probe_alpha.x_range.start, views.probe_alpha.x_range.end)
    views.set_measure("eq6_entropy")
    assert list(views.points.data["rank"]) == [1.5, 1.2]
    assert views.rank_probe.xaxis.axis_label == "final-layer Eq. 6 entropy H"
    assert views.rank_probe.title.text == "Rank vs probe: Pearson r needs 3 members"  # no r from this measure
    assert (views.probe_alpha.x_range.start, views.probe_alpha.x_range.end) == before
    assert views.probe_alpha.xaxis.axis_label == "α_min"
