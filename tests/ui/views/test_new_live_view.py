"""A new live view, added as "How to add a live view" (docs/extending.md) says: one module — a builder, a view and
one :func:`~lab.ui.views.replays.register` call — and nothing else touched. Its kind is then built and drawn live on
the Playground, written to the run folder, replayed on the Runs page and shown in a notebook."""

import pkgutil
import sys

import numpy as np
import panel as pn
import pytest
from bokeh.models import ColumnDataSource
from bokeh.plotting import figure

import lab.ui.views.kind_views
from lab.snapshots import kinds
from lab.snapshots.kinds import KINDS, Kind
from lab.snapshots.snapshot import Snapshot, load_saved
from lab.ui.display import snapshot_view
from lab.ui.pages.playground import PlaygroundPage
from lab.ui.views import replays
from lab.ui.views.saved_snapshots import SavedSnapshots
from tests.jobs.helpers import wait_for
from tests.ui.driving import poll_until

KIND = "weight_norms"


def weight_norms(model) -> dict[str, np.ndarray]:
    """The builder: the Frobenius norm of every weight matrix, in the model's order."""
    return {"norms": np.array([float(p.detach().norm()) for p in model.parameters() if p.ndim == 2], np.float32)}


class WeightNormBars:
    """The view: one bar per weight matrix, redrawn in place."""

    def __init__(self) -> None:
        self.source = ColumnDataSource({"layer": [], "norm": []})
        self.figure = figure(title="Weight norms", frame_width=300, frame_height=160)
        self.figure.vbar(x="layer", top="norm", width=0.8, source=self.source)
        self.steps: list[int] = []

    def panes(self) -> list[pn.viewable.Viewable]:
        return [pn.pane.Bokeh(self.figure)]

    def show(self, snapshot: dict[str, np.ndarray], step: int, points: tuple[np.ndarray, np.ndarray]) -> None:
        norms = snapshot["norms"]
        self.source.data = {"layer": list(range(len(norms))), "norm": norms.tolist()}
        self.figure.title.text = f"Weight norms at step {step}"
        self.steps.append(step)


@pytest.fixture
def registered():
    """The registration (undone after the test)."""
    kinds.register(Kind(KIND, "Weight norms per matrix", {"norms": 1}, weight_norms, (2, 0.0)))
    replays.register(KIND, WeightNormBars, live_on=("Playground",))
    yield KIND
    for table in (KINDS, replays.REPLAYS, replays.LIVE_ON):
        table.pop(KIND, None)


def test_every_module_of_kind_views_is_imported_so_a_new_module_registers_itself():
    modules = {m.name for m in pkgutil.iter_modules(lab.ui.views.kind_views.__path__)}
    assert {"nodes", "alignment"} <= modules
    assert all(f"lab.ui.views.kind_views.{m}" in sys.modules for m in modules)
    assert {"nodes", "alignment"} <= set(replays.REPLAYS)


def test_a_view_registers_against_a_registered_kind_and_one_drawn_live_needs_a_builder_and_a_cadence():
    with pytest.raises(ValueError, match="'never_registered' is not a snapshot kind"):
        replays.register("never_registered", WeightNormBars)
    kinds.register(Kind("no_builder", "t", {"x": 1}))
    try:
        with pytest.raises(ValueError, match="builder and a cadence"):
            replays.register("no_builder", WeightNormBars, live_on=("Playground",))
        assert "no_builder" not in replays.REPLAYS
    finally:
        KINDS.pop("no_builder")


def test_a_new_kind_is_drawn_live_replayed_from_the_run_folder_and_shown_in_a_notebook(registered, manager):
    assert [k.name for k in replays.live_kinds("Playground")] == [KIND] and KINDS[KIND].builder is weight_norms
    page = PlaygroundPage(manager=manager, depth=3, width=4, n=200)
    view = page.live_views[KIND]
    assert any(getattr(p, "object", None) is view.figure for p in _descendants(page.views()))  # laid out
    page.param.trigger("play")
    # drawn live: the job built the kind at its cadence and the page handed each new one to the view
    assert poll_until(page, lambda: len(view.steps) >= 2 and view.steps[-1] >= 4)
    bars = view.source.data["norm"]
    assert len(bars) == 3 + 2 and all(b > 0 for b in bars)  # stem, three blocks, head
    job, run = page.job, page.job.run
    job.stop()  # its last snapshots are written by the job's own thread before it ends
    assert wait_for(lambda: not job.is_alive(), timeout=60) and run.snapshot_versions(KIND)
    # replayed read-only from the run folder, in the same view
    saved = SavedSnapshots()
    saved.open(run)
    assert saved.kind.value == KIND or KIND in saved.kind.options.values()
    saved.kind.value = KIND
    replay = saved.views[KIND]
    assert replay.steps and replay.steps[-1] == run.snapshot_versions(KIND)[-1]
    # in a notebook, a snapshot of the kind shows its arrays and the same view
    step, snap = load_saved(run, KIND)
    shown = snapshot_view(snap)
    assert any(isinstance(p, pn.pane.Bokeh) and p.object.title.text == f"Weight norms at step {step}"
               for p in _descendants(shown))


def test_a_notebook_snapshot_that_breaks_its_kinds_contract_says_why(registered):
    shown = snapshot_view(Snapshot(KIND, {"norms": np.zeros((2, 2), np.float32), "step": np.int64(3)}))
    assert "numeric array of 1 non-empty axes" in str([getattr(p, "object", "") for p in _descendants(shown)])
    assert not any(isinstance(p, pn.pane.Bokeh) for p in _descendants(shown))


def _descendants(layout) -> list:
    out, todo = [], [layout]
    while todo:
        item = todo.pop()
        out.append(item)
        todo.extend(getattr(item, "objects", []))
    return out
