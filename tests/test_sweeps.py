"""Sweep plans and sweep folders: every member an ordinary run folder that the lab's readers open."""

import json

import pytest
import torch

from lab.config import ConfigError, config_of_run, load_config
from lab.runfolder import layout
from lab.runs.store import Run, RunStore
from lab.sweeps import create_sweep, plan_sweep, read_sweep, split_values, train_sweep
from lab.train import Callback, build_model
from lab.train.checkpoint import load_checkpoint
from lab.train.runner import train_and_evaluate

CONFIG = "configs/spiral.yaml"
SMALL = ["model.depth=3", "model.width=8", "data.n=512", "train.epochs=100", "train.max_steps=12",
         "train.eval_every=6", "train.log_every=3"]


def test_split_values_respects_brackets_and_quotes():
    assert split_values("1.0,0.8, 0.6") == ["1.0", "0.8", "0.6"]
    assert split_values("[0.9, 0.99]") == ["[0.9, 0.99]"]
    assert split_values("[0.9,0.99],[0.8,0.999]") == ["[0.9,0.99]", "[0.8,0.999]"]
    assert split_values("'a,b',c") == ["'a,b'", "c"]
    assert split_values("0.5") == ["0.5"]


def test_plan_sweeps_the_product_in_order_and_groups_what_cannot_share_an_ensemble():
    plan = plan_sweep(CONFIG, [*SMALL, "model.alpha_min=1.0,0.5", "model.depth=2,3",
                               "train.betas=[0.9,0.99],[0.8,0.9]"])
    assert plan.swept == {"model.alpha_min": [1.0, 0.5], "model.depth": [2, 3],
                          "train.betas": [[0.9, 0.99], [0.8, 0.9]]}
    assert len(plan.members) == 8
    assert [m.values["model.alpha_min"] for m in plan.members] == [1.0] * 4 + [0.5] * 4  # first key slowest
    assert [m.config.model.depth for m in plan.members] == [2, 2, 3, 3, 2, 2, 3, 3]
    assert plan.members[1].config.train.betas == (0.8, 0.9)
    assert plan.members[0].name == "00-alpha_min-1.0-depth-2-betas-[0.9,0.99]"
    assert plan.groups == [[0, 1, 4, 5], [2, 3, 6, 7]]  # model.depth splits; alpha_min and betas do not
    assert plan.members[5].config == load_config(CONFIG, [*SMALL, "model.alpha_min=0.5", "model.depth=2",
                                                          "train.betas=[0.8,0.9]"])
    same_leaf = plan_sweep(CONFIG, [*SMALL, "model.seed=0,1", "train.seed=0,1"])
    assert same_leaf.members[1].name == "01-model.seed-0-train.seed-1"


@pytest.mark.parametrize(("overrides", "message"), [
    (["model.alpha_min=0.5"], "nothing to sweep"),
    (["model.alpha_min=1.0,2"], "model.alpha_min must be in [0.0, 1.0]; got 2"),
    (["model.alpah_min=1.0,0.5"], "unknown key model.alpah_min"),
    (["model.alpha_min=1.0,0.5", "model.alpha_min=0.2,0.1"], "swept twice"),
    (["model.alpha_min=1.0,,0.5"], "empty value"),
    (["model.alpha_min"], "must look like section.key=value"),
    (["model.name=ra_type1", "data.name=digits", "model.seed=0,1"], "residual_mlp"),
    (["data.name=mnist", "model.alpha_min=1.0,0.5"], "2-D points or scikit-learn's digits"),
])
def test_bad_sweeps_are_clear_errors(overrides, message):
    with pytest.raises(ConfigError) as err:
        plan_sweep(CONFIG, overrides)
    assert message in str(err.value)


def test_sweep_folder_holds_ordinary_runs(tmp_path):
    plan = plan_sweep(CONFIG, [*SMALL, "model.shortcut=linear", "model.alpha_min=1.0,0.6", "model.depth=2,3"])
    folder, runs = create_sweep(plan, RunStore(tmp_path))
    assert folder.path.parent == tmp_path and folder.id.endswith("-spiral-sweep")
    assert all(Run(r.path).read_status()["state"] == "queued" for r in runs)
    statuses = train_sweep(plan, folder, runs, progress=False)
    assert [s["state"] for s in statuses] == ["completed"] * 4
    assert sorted(p.name for p in folder.path.iterdir()) == sorted([layout.SWEEP, *(r.id for r in runs)])
    sweep = read_sweep(folder.path)
    assert sweep["swept"] == {"model.alpha_min": [1.0, 0.6], "model.depth": [2, 3]}
    assert [m["run"] for m in sweep["members"]] == [r.id for r in runs]
    assert [m["values"] for m in sweep["members"]][1] == {"model.alpha_min": 1.0, "model.depth": 3}
    assert [m["group"] for m in sweep["members"]] == [0, 1, 0, 1]
    assert {m["state"] for m in sweep["members"]} == {"completed"}
    listed = sorted(r.id for r in RunStore(folder.path).runs())
    assert listed == sorted(r.id for r in runs)
    for member, run in zip(plan.members, runs, strict=True):
        run = Run(run.path)
        cfg = config_of_run(run)
        assert cfg == member.config
        status = run.read_status()
        assert status["step"] == status["total_steps"] == 12 and 0 <= status["metrics"]["test_acc"] <= 1
        records, _ = run.read_metrics()
        assert [r["step"] for r in records if r["kind"] == "step"] == [3, 6, 9, 12]
        assert [r["step"] for r in records if r["kind"] == "eval"] == [6, 12]
        model = build_model(cfg)
        state = load_checkpoint(run, "last")
        model.load_state_dict(state["model"])
        assert state["step"] == 12 and run.has_checkpoint("best")
        assert list(run.path.glob("events.out.tfevents.*"))


def test_a_member_equals_its_solo_run(tmp_path):
    plan = plan_sweep(CONFIG, [*SMALL, "model.shortcut=linear", "model.alpha_min=1.0,0.6"])
    folder, runs = create_sweep(plan, RunStore(tmp_path / "sweep"))
    train_sweep(plan, folder, runs, progress=False)
    solo = RunStore(tmp_path / "solo").create("solo")
    train_and_evaluate(plan.members[1].config, solo, progress=False)
    mine, theirs = load_checkpoint(runs[1]), load_checkpoint(solo)
    for name, value in theirs["model"].items():
        assert torch.allclose(mine["model"][name], value, rtol=1e-4, atol=1e-6), name
    evals = [[r for r in run.read_metrics()[0] if r["kind"] == "eval"] for run in (runs[1], solo)]
    assert [r["step"] for r in evals[0]] == [r["step"] for r in evals[1]]
    assert evals[0][-1]["test_acc"] == pytest.approx(evals[1][-1]["test_acc"], abs=1e-2)


def test_divergence_stays_with_its_member(tmp_path):
    plan = plan_sweep(CONFIG, [*SMALL, "train.optimizer=sgd", "train.lr=0.05,50"])
    folder, runs = create_sweep(plan, RunStore(tmp_path))
    statuses = train_sweep(plan, folder, runs, progress=False)
    assert [s["state"] for s in statuses] == ["completed", "diverged"]
    assert "lower the learning rate (train.lr=50)" in statuses[1]["message"]
    assert 0 < statuses[1]["step"] < 12
    assert [m["state"] for m in read_sweep(folder.path)["members"]] == ["completed", "diverged"]


class StopAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, ensemble, losses):
        if ensemble.step == self.step:
            ensemble.should_stop = True


def test_a_stopped_sweep_starts_no_further_group_and_a_member_resumes_alone(tmp_path):
    plan = plan_sweep(CONFIG, [*SMALL, "model.depth=2,3", "train.droppath=residual_droppath",
                               "train.drop_path_rate=0.3"])
    folder, runs = create_sweep(plan, RunStore(tmp_path / "sweep"))
    statuses = train_sweep(plan, folder, runs, progress=False, callbacks=[StopAt(5)])
    assert [s["state"] for s in statuses] == ["stopped", "stopped"]
    assert statuses[0]["step"] == 5 and statuses[1]["message"] == "not started: the sweep was stopped"
    assert load_checkpoint(Run(runs[0].path))["step"] == 5  # the final evaluation's checkpoint
    assert json.loads((folder.path / layout.SWEEP).read_text())["members"][1]["state"] == "stopped"
    # the member resumes as a solo run (odd step: ResidualDroppath's masks come from the checkpoint) and ends
    # where the member trained alone from the start ends
    resumed = train_and_evaluate(config_of_run(runs[0]), runs[0], resume=True, progress=False)
    solo = RunStore(tmp_path / "solo").create("solo")
    train_and_evaluate(plan.members[0].config, solo, progress=False)
    assert resumed["state"] == "completed" and resumed["step"] == 12
    mine, theirs = load_checkpoint(runs[0]), load_checkpoint(solo)
    for name, value in theirs["model"].items():
        assert torch.allclose(mine["model"][name], value, rtol=1e-4, atol=1e-6), name
    steps = [r["step"] for r in runs[0].read_metrics()[0] if r["kind"] == "step"]
    assert steps == [r["step"] for r in solo.read_metrics()[0] if r["kind"] == "step"]


def test_a_sweep_classifies_digits_as_one_ensemble_of_residual_mlps(tmp_path):
    """Figure 9 at toy scale sweeps α_min over residual MLPs classifying scikit-learn's 8 × 8 digits (ten classes): the
    images are read as their 64 pixels, by the ensemble and by each member's model alike."""
    from lab.train.build import build_data

    plan = plan_sweep(None, ["data.name=digits", "model.depth=3", "model.width=16", "train.epochs=8",
                             "train.lr=0.003", "train.batch_size=64", "model.alpha_min=1.0,0.5"])
    assert plan.groups == [[0, 1]]  # one ensemble
    folder, runs = create_sweep(plan, RunStore(tmp_path))
    statuses = train_sweep(plan, folder, runs, progress=False)
    assert [s["state"] for s in statuses] == ["completed", "completed"]
    data = build_data(plan.members[0].config)
    for run, status in zip(runs, statuses, strict=True):
        model = build_model(config_of_run(run), data)
        model.load_state_dict(load_checkpoint(run, "last")["model"])
        with torch.no_grad():
            acc = (model.eval()(data.x_test).argmax(1) == data.y_test).float().mean().item()
        assert acc == pytest.approx(status["metrics"]["test_acc"], abs=1e-6) and acc > 0.5  # chance: 0.1
