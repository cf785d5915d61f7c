"""A sweep's rank snapshot from its members' run folders: what the Rank page draws live, rebuilt from checkpoints."""

import numpy as np
import pytest

from lab.config import to_dict
from lab.reports.sweep_snapshot import checkpoint_rank_snapshot, rank_snapshot
from lab.runs.store import RunStore
from lab.sweeps import create_sweep, plan_sweep, train_sweep
from lab.train.checkpoint import save_checkpoint
from lab.train.runner import make_trainer

SMALL = ["model.depth=4", "model.width=8", "data.n=512", "train.epochs=2"]


def test_the_snapshot_of_checkpoints_is_the_snapshot_of_the_trained_models(tmp_path):
    plan = plan_sweep(None, [*SMALL, "model.alpha_min=1.0,0.5"])
    folder, runs = create_sweep(plan, RunStore(tmp_path))
    train_sweep(plan, folder, runs, progress=False)
    queued = RunStore(folder.path).create("queued")  # a member whose job has not started: no checkpoint yet
    queued.write_config(to_dict(plan.members[0].config))
    snapshot, left_out = checkpoint_rank_snapshot([*runs, queued])
    assert left_out == [f"{queued.id}: no checkpoint yet"] and [str(n) for n in snapshot["member_names"]] == \
        [r.id for r in runs]
    # the same members trained alone (float32: the ensemble rounds its batched matmuls a little differently), read by
    # the live snapshot's function
    trainers = [make_trainer(m.config) for m in plan.members]
    for trainer in trainers:
        trainer.fit()
    live = rank_snapshot([t.model for t in trainers], trainers[0].data, names=[r.id for r in runs])
    np.testing.assert_allclose(snapshot["effective_rank"], live["effective_rank"], rtol=1e-4)
    np.testing.assert_allclose(snapshot["probe_acc"], live["probe_acc"], atol=0.02)  # a held-out point may flip
    assert snapshot["test_acc"].tolist() == pytest.approx([r.read_status()["metrics"]["test_acc"] for r in runs])


def test_sweeps_without_two_readable_members_or_of_other_models_are_refused(tmp_path):
    plan = plan_sweep(None, [*SMALL, "model.alpha_min=1.0,0.5"])
    folder, runs = create_sweep(plan, RunStore(tmp_path))
    with pytest.raises(ValueError, match="0 member"):
        checkpoint_rank_snapshot(runs)  # queued: nothing trained yet
    other = RunStore(tmp_path).create("other")
    other.write_config({"name": "other", "model": {"name": "fc_resnet"}, "data": {"name": "digits"}})
    save_checkpoint(other, {"model": {}}, "last")
    with pytest.raises(ValueError, match="fc_resnet"):
        checkpoint_rank_snapshot([other])


def test_members_that_ask_for_huge_models_are_refused_before_anything_is_built(tmp_path, monkeypatch):
    """A sweep folder from elsewhere: two 200-byte configs asking for 8192-wide models cost nothing to refuse, and a
    checkpoint that does not hold its config's weights is left out before its model is built."""
    import tracemalloc

    import torch

    from lab.reports import sweep_snapshot
    from lab.runs.store import Run

    plan = plan_sweep(None, [*SMALL, "model.alpha_min=1.0,0.5,0.3"])
    folder, runs = create_sweep(plan, RunStore(tmp_path))
    train_sweep(plan, folder, runs, progress=False)
    huge = []
    for name in ("huge-a", "huge-b"):
        run = Run(folder.path / name)
        (run.path / "checkpoints").mkdir(parents=True)
        run.write_config({**to_dict(plan.members[0].config), "model": {"name": "residual_mlp", "width": 8192}})
        save_checkpoint(run, {"model": {}, "step": 1}, "last")
        huge.append(run)
    swapped = runs[2]  # a checkpoint of another model under a valid config
    save_checkpoint(swapped, {"model": {"stem.weight": torch.zeros(3, 3)}, "step": 1}, "last")
    built = []
    real = sweep_snapshot.build_model
    monkeypatch.setattr(sweep_snapshot, "build_model", lambda cfg, data=None: built.append(
        (cfg.model.width, torch.get_default_device().type)) or real(cfg, data))
    tracemalloc.start()
    snapshot, left_out = checkpoint_rank_snapshot([*runs, *huge])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [str(n) for n in snapshot["member_names"]] == [r.id for r in runs[:2]]
    assert any(f"{huge[0].id}: its model has 2,147,786,754 parameters" in m for m in left_out)
    assert any(f"{swapped.id}: its checkpoint does not hold the weights" in m for m in left_out)
    assert (8192, "meta") in built and (8192, "cpu") not in built, "a huge model is laid out, never built"
    assert peak < 200e6, f"peak {peak / 1e6:.0f} MB"


def test_a_members_status_of_any_shape_does_not_break_the_snapshot(tmp_path):
    plan = plan_sweep(None, [*SMALL, "model.alpha_min=1.0,0.5"])
    folder, runs = create_sweep(plan, RunStore(tmp_path))
    train_sweep(plan, folder, runs, progress=False)
    runs[0].write_status("completed", "x", step=[1, 2], metrics={"test_acc": "high"})  # a foreign writer's status
    runs[1].write_status("completed", "x", step=10**400)
    snapshot, left_out = checkpoint_rank_snapshot(runs)
    assert left_out == [] and snapshot["eval_step"].tolist() == [0, 0] and np.isnan(snapshot["test_acc"]).all()
