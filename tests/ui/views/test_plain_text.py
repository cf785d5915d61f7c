"""Text from a run folder in a figure's title and labels is drawn as typed: never typeset as TeX by Bokeh."""

import numpy as np
import pytest
from bokeh.models import PlainText

from lab.ui.views.live_rank import RankViews
from lab.ui.views.run_compare import CompareViews

TEX = ["$$x^2$$", r"\(x\)", r"\[x\]", r"loss $$\href{javascript:alert(1)}{x}$$ and \(y\)"]
"""Metric and member names in each of the delimiters Bokeh looks for, alone and inside other text."""


@pytest.mark.parametrize("name", TEX)
def test_a_metric_named_in_tex_is_compared_under_a_plain_title_and_axis_label(name):
    """The attack: a run folder's ``metrics.jsonl`` names a metric ``$$x^2$$``; comparing its run drew the name as a
    formula (and could make a link of ``\\href``). The title and the y axis label are plain text models."""
    views = CompareViews()
    records = [[{"kind": "eval", "step": s, name: 0.5 + s / 100} for s in (10, 20)]] * 2
    views.show(["a", "b"], [{"model": {"depth": 4}}, {"model": {"depth": 8}}], records)
    fig = views.figures[name].figure
    (y_axis,) = fig.yaxis
    assert isinstance(fig.title.text, PlainText) and fig.title.text.text == name
    assert isinstance(y_axis.axis_label, PlainText) and y_axis.axis_label.text == name


@pytest.mark.parametrize("name", TEX)
def test_a_sweep_members_name_in_tex_labels_its_bar_as_plain_text(name):
    """A member's name (its run folder's) labels its bars when two members share an α_min."""
    views = RankViews()
    views.snapshot = {"alpha_min": np.array([0.5, 0.5]), "member_names": np.array([name, "other"]),
                      "diverged": np.array([False, False]), "train_acc": np.array([0.9, 0.8]),
                      "test_acc": np.array([0.85, 0.75])}
    views._accuracy()
    labels = views.accuracy.xaxis[0].major_label_overrides
    assert all(isinstance(label, PlainText) for label in labels.values()) and labels[0].text == name
