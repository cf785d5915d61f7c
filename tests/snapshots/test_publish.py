"""Snapshot publishing: builders take a model, cadences per kind, on-demand kinds built only when asked for."""

import threading
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lab.nn import ResidualMLP
from lab.snapshots.builders import SelfJudged, nodes_snapshot
from lab.snapshots.publish import Publisher, compact


def _trainer(step: int, model=None):
    return SimpleNamespace(step=step, model=model)


def test_nodes_snapshot_takes_a_model():
    model = ResidualMLP(depth=3, width=4, shortcut="linear", alpha_min=0.5)
    snapshot = nodes_snapshot(model)
    assert snapshot["maps"].shape == (4, 4, 50, 50) and snapshot["alphas"].tolist() == [1.0, 0.75, 0.5]


def test_on_demand_kind_is_built_only_when_due_and_requested():
    built, sink = [], []
    publisher = Publisher(lambda kind, p: sink.append((kind, int(p["step"]))), cadence={"a": (2, 0.0), "b": (2, 0.0)},
                          builders={"a": lambda m: built.append("a") or {}, "b": lambda m: built.append("b") or {}},
                          on_demand=("b",))
    publisher.on_train_start(_trainer(0))  # a forced publish builds every kind
    assert sink == [("a", 0), ("b", 0)]
    for step in range(1, 7):
        publisher.on_step_end(_trainer(step), 0.0)
    assert [s for k, s in sink if k == "a"] == [0, 2, 4, 6]
    assert [s for k, s in sink if k == "b"] == [0]  # never asked for again
    publisher.request("b")
    publisher.on_step_end(_trainer(7), 0.0)  # due (7 − 0 ≥ 2) and asked for: built once
    publisher.on_step_end(_trainer(9), 0.0)  # due but the request was used up
    assert [s for k, s in sink if k == "b"] == [0, 7]
    publisher.request("b")
    publisher.on_step_end(_trainer(8), 0.0)  # asked for, not due yet (8 − 7 < 2): waits
    publisher.on_step_end(_trainer(10), 0.0)
    assert [s for k, s in sink if k == "b"] == [0, 7, 10]


def test_beside_training_a_step_only_copies_the_model_and_snapshots_keep_their_steps():
    model, sink, release = torch.nn.Linear(2, 1), [], threading.Event()

    def weight(m):
        release.wait(10)
        return {"w": m.weight.detach().clone().numpy()}

    def set_weight(value: float) -> None:
        with torch.no_grad():
            model.weight.fill_(value)

    publisher = Publisher(lambda kind, p: sink.append((int(p["step"]), float(p["w"][0, 0]), p.forced)),
                          cadence={"x": (1, 0.0)}, builders={"x": weight}, beside=True)
    set_weight(1.0)
    publisher.on_step_end(_trainer(1, model), 0.0)  # returns at once: the build waits on the builder thread
    set_weight(2.0)  # the next step trains meanwhile
    step2 = threading.Thread(target=publisher.on_step_end, args=(_trainer(2, model), 0.0))
    step2.start()  # x is due again while the first build runs: this step waits for it
    step2.join(0.3)
    assert step2.is_alive() and sink == []
    release.set()
    step2.join(10)
    set_weight(3.0)
    publisher.on_train_end(_trainer(3, model))  # forced: after the running build, from the model itself
    assert sink == [(1, 1.0, False), (2, 2.0, False), (3, 3.0, True)]
    publisher.close()


def test_non_finite_payload_is_never_published():
    sink = []
    publisher = Publisher(lambda kind, p: sink.append(p), cadence={"x": (1, 0.0)},
                          builders={"x": lambda m: {"v": np.array([np.nan], np.float32)}})
    publisher.on_train_start(_trainer(0, torch.nn.Identity()))
    assert sink == []


def test_a_self_judged_builder_decides_alone():
    sink, snapshots = [], iter([{"v": np.array([np.nan], np.float32)}, None])
    publisher = Publisher(lambda kind, p: sink.append(p), cadence={"x": (1, 0.0)},
                          builders={"x": SelfJudged(lambda m: next(snapshots))})
    publisher.on_train_start(_trainer(0, torch.nn.Identity()))  # NaN means "undefined" here: published
    publisher.on_step_end(_trainer(1, torch.nn.Identity()), 0.0)  # None: not published
    assert len(sink) == 1 and np.isnan(sink[0]["v"]).all() and int(sink[0]["step"]) == 0


def test_a_run_shorter_than_the_disk_interval_keeps_its_first_and_last_snapshots(tmp_path):
    """Snapshots reach the run folder at most every ``disk_every_s`` seconds, but those taken because training started
    or ended always do: a replay of the run finds the state it ended at, however fast it trained."""
    from lab.jobs.thread import ThreadJob
    from lab.runs.store import RunStore
    from tests.jobs.helpers import tiny

    run = RunStore(tmp_path).create("short")
    job = ThreadJob(tiny(**{"train.max_steps": 30}), run, cadence={"nodes": (5, 0.0)}, disk_every_s=3600).start()
    assert job.wait(timeout=120)["state"] == "completed"
    assert run.snapshot_versions("nodes") == [0, 30]


def test_compact_halves_large_float_arrays_but_never_turns_a_finite_value_into_inf():
    maps = np.linspace(-3.0, 3.0, 8192, dtype=np.float32)
    small = compact({"maps": maps, "alphas": np.ones(4, np.float32), "step": np.int64(3)})
    assert small["maps"].dtype == np.float16 and np.allclose(small["maps"], maps, atol=2e-3)
    assert small["alphas"].dtype == np.float32 and small["step"] == 3  # small arrays and scalars stay as they are
    large = compact({"maps": maps * 1e5})  # beyond float16's ±65504: would become ±inf
    assert large["maps"].dtype == np.float32 and np.isfinite(large["maps"]).all()


@pytest.mark.parametrize("beside", [False, True])
def test_a_builder_that_raises_drops_its_kind_with_a_note_and_the_others_go_on(beside):
    """On the training thread and beside it alike, a kind whose builder raises is built no more; the note names the
    kind and the error, and every other kind is still published."""
    model, sink, notes = torch.nn.Linear(2, 1), [], []  # no forward_intermediates: no node maps
    publisher = Publisher(lambda kind, p: sink.append((kind, int(p["step"]))),
                          cadence={"nodes": (1, 0.0), "w": (1, 0.0)},
                          builders={"nodes": nodes_snapshot, "w": lambda m: {"w": m.weight.detach().numpy()}},
                          beside=beside, noted=notes.append)
    for step in range(1, 4):  # the first build is due at step 1: beside, on the builder thread
        publisher.on_step_end(_trainer(step, model), 0.0)
    publisher.on_train_end(_trainer(4, model))
    publisher.close()
    assert sink == [("w", step) for step in range(1, 5)]
    assert notes == [publisher.dropped["nodes"]] and list(publisher.dropped) == ["nodes"]
    assert notes[0].startswith("nodes snapshots are off for this run: their builder raised AttributeError: ")
    assert "forward_intermediates" in notes[0]


def test_a_dropped_kind_is_a_warning_where_nobody_takes_the_note():
    def broken(model):
        raise ValueError("x" * 5000)

    publisher = Publisher(lambda kind, p: None, cadence={"a": (1, 0.0)}, builders={"a": broken})
    with pytest.warns(RuntimeWarning, match=r"a snapshots are off for this run: their builder raised ValueError: x+ "
                                            r"… \(4,400 more characters\)"):
        publisher.on_train_start(_trainer(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        publisher.on_step_end(_trainer(1), 0.0)  # not built again, so no second warning
