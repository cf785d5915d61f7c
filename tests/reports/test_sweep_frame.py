"""A sweep's rank frame from its members' run folders: what the Rank page draws live, rebuilt from checkpoints."""

import numpy as np
import pytest

from lab.config import to_dict
from lab.jobs.runner import make_trainer
from lab.reports.sweep_frame import checkpoint_rank_frame, rank_frame
from lab.runs.store import RunStore
from lab.sweeps import create_sweep, plan_sweep, train_sweep

SMALL = ["model.depth=4", "model.width=8", "data.n=512", "train.epochs=2"]


def test_the_frame_of_checkpoints_is_the_frame_of_the_trained_models(tmp_path):
    plan = plan_sweep(None, [*SMALL, "model.alpha_min=1.0,0.5"])
    folder, runs = create_sweep(plan, RunStore(tmp_path))
    train_sweep(plan, folder, runs, progress=False)
    queued = RunStore(folder.path).create("queued")  # a member whose job has not started: no checkpoint yet
    queued.write_config(to_dict(plan.members[0].config))
    frame, left_out = checkpoint_rank_frame([*runs, queued])
    assert left_out == [queued.id] and [str(n) for n in frame["member_names"]] == [r.id for r in runs]
    # the same members trained alone (float32: the ensemble rounds its batched matmuls a little differently), read by
    # the live frame's function
    trainers = [make_trainer(m.config) for m in plan.members]
    for trainer in trainers:
        trainer.fit()
    live = rank_frame([t.model for t in trainers], trainers[0].data, names=[r.id for r in runs])
    np.testing.assert_allclose(frame["effective_rank"], live["effective_rank"], rtol=1e-4)
    np.testing.assert_allclose(frame["probe_acc"], live["probe_acc"], atol=0.02)  # a held-out point may flip
    assert frame["test_acc"].tolist() == pytest.approx([r.read_status()["metrics"]["test_acc"] for r in runs])


def test_sweeps_without_two_readable_members_or_of_other_models_are_refused(tmp_path):
    plan = plan_sweep(None, [*SMALL, "model.alpha_min=1.0,0.5"])
    folder, runs = create_sweep(plan, RunStore(tmp_path))
    with pytest.raises(ValueError, match="0 member"):
        checkpoint_rank_frame(runs)  # queued: nothing trained yet
    other = RunStore(tmp_path).create("other")
    other.write_config({"name": "other", "model": {"name": "fc_resnet"}, "data": {"name": "digits"}})
    other.save_checkpoint({"model": {}}, "last")
    with pytest.raises(ValueError, match="fc_resnet"):
        checkpoint_rank_frame([other])
