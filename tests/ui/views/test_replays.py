"""The views of saved snapshots: one per kind a run folder's snapshots are shown in, registered once each."""

import pytest

from lab.snapshots.kinds import ALIGNMENT, KINDS, NODES, SIMILARITY
from lab.ui.views import replays
from lab.ui.views.kind_views.nodes import NodesReplay


def test_a_view_is_registered_only_for_a_kind_without_one():
    assert set(replays.REPLAYS) == {NODES, SIMILARITY, ALIGNMENT} and set(replays.REPLAYS) <= set(KINDS)
    with pytest.raises(ValueError, match="not a snapshot kind"):
        replays.register("no-such-kind", NodesReplay)
    with pytest.raises(ValueError, match="not a snapshot kind"):
        replays.register(NODES, NodesReplay)  # it has one
    # the refused calls added nothing
    assert set(replays.REPLAYS) == {NODES, SIMILARITY, ALIGNMENT} and KINDS[NODES].title != "again"
    assert replays.live_kinds("Playground") == []  # the lab's own kinds are laid out by their pages


def test_a_nodes_snapshot_larger_than_its_run_is_refused_and_none_costs_more_than_the_grid_it_draws(tmp_path):
    """The attack: a run folder's ``nodes`` snapshot declaring 2,048 tiles per layer (a few hundred kB, compressed);
    replaying it cost 4.3 GB and froze every session for 18 s (this test's snapshot: 20 GB and a minute). Checked
    against the run's own config (4 blocks × 32) it is refused with the sizes named, before any work; one that fits
    its run's large config is drawn at most :data:`MAX_NODES` nodes per layer, in bounded memory."""
    import resource
    from collections import Counter

    import numpy as np

    from lab.runs.store import RunStore
    from lab.ui.views.kind_views.nodes import MAX_NODES
    from lab.ui.views.saved_snapshots import SavedSnapshots

    rng = np.random.default_rng(0)
    hostile = {"maps": rng.standard_normal((5, 2048, 4, 4), np.float32),
               "weights": rng.standard_normal((5, 2048, 2048)).astype(np.float16),
               "decision": rng.random((4, 4), np.float32), "limit": np.float32(1.0)}
    store = RunStore(tmp_path)
    small, large = store.create("small"), store.create("large")
    small.write_config({"model": {"name": "residual_mlp", "depth": 4, "width": 32}})
    large.write_config({"model": {"name": "residual_mlp", "depth": 4, "width": 2048}})
    for run in (small, large):
        run.save_snapshot(NODES, 10, hostile)
    saved = SavedSnapshots()
    saved.open(small)
    saved.kind.value = NODES
    saved.draw()
    assert saved.problem.visible and "2048 nodes" in saved.problem.object and "of 32" in saved.problem.object
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    saved.open(large)
    saved.kind.value = NODES
    saved.draw()
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert not saved.problem.visible, saved.problem.object
    drawn = saved.views[NODES].grid.object
    assert drawn is not None and grown_mb < 1500, grown_mb
    # the work is bounded by what is drawn: each of the 5 layers shows MAX_NODES of its 2,048 nodes (one hover box each)
    hover = next(r.data_source.data for r in drawn.renderers if "node" in r.data_source.data)
    tiles = Counter(hover["layer"])
    assert [tiles[str(layer)] for layer in range(5)] == [MAX_NODES] * 5, tiles
    assert MAX_NODES == 64


def test_a_served_replay_reads_and_checks_its_snapshot_off_the_event_loop(tmp_path, monkeypatch):
    """On a served page the snapshot is read and checked in the page's worker; the session's loop only draws it,
    and a step asked for while an earlier one was read is the one drawn."""
    import threading
    from concurrent.futures import ThreadPoolExecutor
    from types import SimpleNamespace

    import numpy as np
    from panel.io.state import set_curdoc

    from lab.runs.store import RunStore
    from lab.ui.views import saved_snapshots
    from lab.ui.views.saved_snapshots import SavedSnapshots

    class Session:  # what a served session's document offers: its loop's next tick
        session_context = SimpleNamespace(request=SimpleNamespace(arguments={}))

        def __init__(self) -> None:
            self.ticks = []

        def add_next_tick_callback(self, fn):
            self.ticks.append(fn)

    run = RunStore(tmp_path).create("run")
    run.write_config({"model": {"name": "residual_mlp", "depth": 2, "width": 4}})
    rng = np.random.default_rng(0)
    for step in (10, 20):
        run.save_snapshot(NODES, step, {"maps": rng.standard_normal((3, 4, 4, 4), np.float32),
                                        "weights": rng.standard_normal((3, 4, 4)).astype(np.float32),
                                        "decision": rng.random((4, 4), np.float32), "limit": np.float32(1.0)})
    readers, read = [], saved_snapshots.read_checked

    def recorded(*args):
        readers.append(threading.current_thread())
        return read(*args)

    monkeypatch.setattr(saved_snapshots, "read_checked", recorded)
    session, pool = Session(), ThreadPoolExecutor(1)
    saved = SavedSnapshots(pool)
    with set_curdoc(session):
        saved.open(run)  # draws its newest, step 20
        saved.step.value = 10  # asked before the first read came back
        pool.shutdown(wait=True)
        assert len(readers) == 2 and all(t is not threading.current_thread() for t in readers)
        assert saved.title.object == "", "nothing drawn before the loop's tick"
        for tick in session.ticks:
            tick()
    assert "at step 10" in saved.title.object and not saved.problem.visible


def test_the_similarity_snapshots_every_playground_job_writes_replay_on_the_runs_page(tmp_path):
    """Every Playground job writes ``similarity`` snapshots beside its node maps; they replay as the Playground's
    layer-similarity view, at their step."""
    from lab.nn import ResidualMLP
    from lab.runs.store import RunStore
    from lab.snapshots.builders import similarity_snapshot
    from lab.snapshots.kinds import KINDS, SIMILARITY
    from lab.ui.views.kind_views.similarity import SimilarityReplay
    from lab.ui.views.saved_snapshots import SavedSnapshots

    run = RunStore(tmp_path).create("playground")
    run.write_config({"model": {"name": "residual_mlp", "depth": 3, "width": 4}})
    run.save_snapshot(SIMILARITY, 40, similarity_snapshot(ResidualMLP(depth=3, width=4, in_dim=2), resolution=12))
    saved = SavedSnapshots()
    saved.open(run)
    assert saved.layout.visible and saved.kind.options == {KINDS[SIMILARITY].title: SIMILARITY}
    assert not saved.problem.visible and "at step 40" in saved.title.object
    view = saved.views[SIMILARITY]
    assert isinstance(view, SimilarityReplay) and view.pane.object is not None
