"""Rich notebook display: a run folder, a snapshot and node maps render as a table and their view."""

import numpy as np
import panel as pn
import pytest
from IPython.core.interactiveshell import InteractiveShell

from lab.analysis.node_maps import node_maps
from lab.jobs.manager import JobManager
from lab.nn import ResidualMLP
from lab.snapshots.snapshot import Snapshot, load_saved
from lab.ui.display import VIEWS, register, run_view, snapshot_view
from tests.jobs.helpers import tiny


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    manager = JobManager(tmp_path_factory.mktemp("runs"), max_jobs=1)
    job = manager.start_thread(tiny(**{"train.max_steps": 40}), disk_every_s=0.05)
    job.wait(120)
    yield job.run
    manager.shutdown()


def test_run_shows_its_state_settings_curves_and_latest_snapshot(run):
    view = run_view(run)
    table = view[0].object
    assert f"run {run.id}" in table and "completed" in table and "40 / 40" in table
    assert "depth=4" in table and "test_acc" in table and "last" in table  # the checkpoint
    kinds = [type(p.object).__name__ for p in view[1:]]
    assert kinds == ["Layout", "Overlay"]  # loss + accuracy curves, the TFMeter grid


def test_snapshot_shows_its_arrays_and_its_kinds_view(run):
    assert run.load_snapshot("nodes")[1]["maps"].dtype == np.float16  # stored compact
    version, snap = load_saved(run, "nodes")  # read back as the views draw it
    assert isinstance(snap, Snapshot) and snap.kind == "nodes" and snap.step == version
    assert snap["maps"].dtype == np.float32
    view = snapshot_view(snap)
    assert "maps" in view[0].object and "[5, 8, 50, 50]" in view[0].object
    assert [type(p).__name__ for p in view[1:]] == ["Bokeh", "Bokeh"]  # the Runs page's replay: grid, decision map
    assert view[1].object is not None and view[2].object is not None
    unknown = snapshot_view(Snapshot("custom", {"x": np.arange(3, dtype=np.float32), "step": np.int64(2)}))
    assert len(unknown) == 1 and "custom snapshot at step 2" in unknown[0].object


def test_ipython_displays_them_through_their_views(run):
    shell = InteractiveShell.instance()
    register(shell)
    pn.extension()  # as a notebook's first cell does
    maps = node_maps(ResidualMLP(depth=2, width=3))
    for obj in (run, load_saved(run, "nodes")[1], maps):
        assert isinstance(obj, tuple(VIEWS))  # a job's run is a NotedRun: displayed as a run
        data, _ = shell.display_formatter.format(obj)
        assert any(k.startswith("application/vnd.holoviews") or k == "text/html" for k in data), data.keys()
        assert "text/plain" in data
