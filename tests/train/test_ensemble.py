"""The ensemble trainer: every member is the run its config would have been alone."""

import pytest
import torch

from lab.config import ExperimentConfig, apply_overrides
from lab.data.toy2d import ToyData
from lab.nn.mlp import ResidualMLP
from lab.train import Callback, Diverged, EnsembleTrainer, build_data, build_model, ensemble_groups
from lab.train.ensemble import shared_settings
from lab.train.runner import make_trainer

STEPS = 30
TOL = 1e-10


def small(**overrides) -> ExperimentConfig:
    # 640 points: 512 for training, 8 whole batches of 64, so ResidualDroppath members share the others' batches
    base = {"model.depth": 4, "model.width": 8, "data.n": 640, "train.batch_size": 64, "train.epochs": 100,
            "train.max_steps": STEPS, "train.eval_every": 10}
    return apply_overrides(ExperimentConfig(), {**base, **overrides})


@pytest.fixture
def float64():
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


def as_float64(data: ToyData) -> ToyData:
    return ToyData(data.x_train.double(), data.y_train, data.x_test.double(), data.y_test, data.name)


def solo(cfg: ExperimentConfig, data: ToyData, callbacks=(), steps=None):
    """``make_trainer(cfg).fit()`` on ``data`` (the float64 copy of the data it builds)."""
    trainer = make_trainer(cfg, callbacks)
    trainer.data = data
    trainer.fit(steps)
    return trainer


def rel_error(model: torch.nn.Module, reference: torch.nn.Module) -> float:
    pairs = zip(model.state_dict().values(), reference.state_dict().values(), strict=True)
    return max(((p - q).abs().max() / q.abs().max().clamp_min(1e-300)).item() for p, q in pairs)


def members(optimizer: str) -> list[ExperimentConfig]:
    common = {"train.optimizer": optimizer}
    if optimizer == "sgd":
        common.update({"train.lr": 0.05, "train.momentum": 0.9})
    if optimizer == "adamw":
        common["train.weight_decay"] = 0.1
    variants = [
        {},
        {"model.shortcut": "linear", "model.alpha_min": 0.5, "model.seed": 1, "train.lr": 0.003},
        {"model.shortcut": "scaled_both", "model.zero_init": True, "train.seed": 2},
        {"train.droppath": "droppath", "train.drop_path_rate": 0.3, "train.seed": 3, "train.betas": [0.8, 0.99],
         "train.lr_schedule": "warmup_cosine", "train.warmup_steps": 5},
        {"train.droppath": "residual_droppath", "train.drop_path_rate": 0.4, "model.shortcut": "linear",
         "model.alpha_min": 0.7, "train.weight_decay": 0.01, "train.momentum": 0.5, "train.lr_schedule": "cosine",
         "train.min_lr": 0.001},
    ]
    return [small(**{**common, **v}) for v in variants]


@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd"])
@pytest.mark.parametrize("weight_decay_on", ["weights", "all"])
def test_members_equal_their_solo_runs(float64, optimizer, weight_decay_on):
    """Under either weight-decay rule (biases spared, or decayed too) the stacked update is each solo run's."""
    cfgs = [apply_overrides(c, {"train.weight_decay_on": weight_decay_on}) for c in members(optimizer)]
    data = as_float64(build_data(cfgs[0]))
    ensemble = EnsembleTrainer(cfgs, data=data)
    metrics = ensemble.fit()
    assert ensemble.step == STEPS
    models = [ensemble.member_model(k) for k in range(len(cfgs))]
    assert rel_error(models[0], models[1]) > 1e-2  # the members really are different runs
    for k, cfg in enumerate(cfgs):
        alone = solo(cfg, data)
        assert alone.step == STEPS
        assert models[k].stem.weight.dtype == torch.float64
        assert rel_error(models[k], alone.model) <= TOL, f"member {k}"
        assert metrics[k] == pytest.approx(alone.last_eval, rel=1e-9)
        mine, theirs = ensemble.member_state_dict(k), alone.state_dict()
        assert mine["step"] == theirs["step"] and torch.equal(mine["mask_generator"], theirs["mask_generator"])
        assert all(torch.equal(a, b) for a, b in zip(mine["droppath_masks"], theirs["droppath_masks"], strict=True))
        assert mine["optimizer"]["param_groups"] == theirs["optimizer"]["param_groups"]
        for i, state in theirs["optimizer"]["state"].items():
            for key, value in state.items():
                assert torch.allclose(mine["optimizer"]["state"][i][key], value, rtol=1e-9, atol=1e-14), (i, key)


@pytest.mark.parametrize(("task", "unet"), [("masked", False), ("denoise", False), ("masked", True)],
                         ids=["masked", "denoise", "masked-unet"])
def test_members_learning_a_generative_task_equal_their_solo_runs(float64, task, unet):
    """Each member hides (or noises) its batches as its solo run does, from its own train.seed, and is scored on the
    same evaluation draws: its weights, losses and probes are the solo run's (also the toy MAE: a decoder at α = 1
    and U-Net skips, probed at its bottleneck)."""
    digits = {"data.name": "digits", "train.task": task, "train.mask_ratio": 0.25,
              **({"model.decoder_depth": 2, "model.unet_skips": True} if unet else {})}
    cfgs = [small(**digits, **v) for v in (
        {}, {"model.shortcut": "linear", "model.alpha_min": 0.5, "model.seed": 1, "train.seed": 1},
        {"train.droppath": "droppath", "train.drop_path_rate": 0.3, "train.seed": 2, "train.lr": 0.003})]
    data = as_float64(build_data(cfgs[0]))
    ensemble = EnsembleTrainer(cfgs, data=data)
    metrics = ensemble.fit()
    models = [ensemble.member_model(k) for k in range(len(cfgs))]
    assert models[0].stem.in_features == (128 if task == "masked" else 64 + 16) and models[0].head.out_features == 64
    for k, cfg in enumerate(cfgs):
        alone = solo(cfg, data)
        assert rel_error(models[k], alone.model) <= TOL, f"member {k}"
        assert metrics[k].keys() == {"train_loss", "test_loss", "probe_acc", "probe_few"}
        assert metrics[k] == pytest.approx(alone.last_eval, rel=1e-9)
    assert metrics[0]["test_loss"] != pytest.approx(metrics[1]["test_loss"], rel=1e-3)


def test_member_checkpoint_is_a_solo_checkpoint(float64, tmp_path):
    """A member saved at an odd step (ResidualDroppath's second iteration needs the first's masks) loads into an
    ordinary ResidualMLP with weights_only=True and resumes as a solo run that ends where the solo run ends."""
    cfgs = members("adam")
    data = as_float64(build_data(cfgs[0]))
    ensemble = EnsembleTrainer(cfgs, data=data)
    ensemble.fit(steps=15)
    for k in (3, 4):
        torch.save(ensemble.member_state_dict(k), tmp_path / "last.pt")
        state = torch.load(tmp_path / "last.pt", weights_only=True)
        model = build_model(cfgs[k], data)
        model.load_state_dict(state["model"])
        assert isinstance(model, ResidualMLP)
        resumed = make_trainer(cfgs[k])
        resumed.data = data
        resumed.load_state_dict(state)
        resumed.fit()
        assert rel_error(resumed.model, solo(cfgs[k], data).model) <= TOL


def test_a_diverging_member_ends_alone(float64):
    cfgs = [small(**{"train.optimizer": "sgd", "train.lr": lr, "model.seed": seed})
            for lr, seed in ((0.05, 0), (50.0, 1), (0.05, 2))]
    data = as_float64(build_data(cfgs[0]))
    events = [Events() for _ in cfgs]
    ensemble = EnsembleTrainer(cfgs, [[e] for e in events], data=data)
    ensemble.fit()
    blown, reference_events = ensemble.members[1], Events()
    reference = make_trainer(cfgs[1], [reference_events])
    reference.data = data
    with pytest.raises(Diverged) as raised:
        reference.fit()
    assert blown.ended and blown.diverged is not None
    assert 0 < blown.diverged.step == raised.value.step == blown.step < STEPS
    assert str(blown.diverged) == str(raised.value)  # the solo run's message: the step and the likely cause
    assert events[1].log == reference_events.log  # its steps until the divergence, then the end
    assert rel_error(ensemble.member_model(1), reference.model) <= TOL  # its last finite parameters
    assert ensemble.member_state_dict(1)["step"] == reference.state_dict()["step"] == blown.step
    for k in (0, 2):
        assert not ensemble.members[k].ended and ensemble.members[k].step == STEPS
        assert rel_error(ensemble.member_model(k), solo(cfgs[k], data).model) <= TOL


class Events(Callback):
    def __init__(self, stop_at: int | None = None):
        self.log, self.stop_at = [], stop_at

    def on_train_start(self, t):
        self.log.append("start")

    def on_step_end(self, t, loss):
        self.log.append(("step", t.step, t.epoch))
        if t.step == self.stop_at:
            t.should_stop = True

    def on_eval_end(self, t, m):
        self.log.append(("eval", t.step, sorted(m)))

    def on_epoch_end(self, t):
        self.log.append(("epoch", t.epoch))

    def on_train_end(self, t):
        self.log.append(("end", t.step))


def test_member_events_and_stop_mirror_a_trainer(float64):
    """Member 1 stops itself at step 12: final evaluation, end, and the others go on to the end."""
    cfgs = [small(**{"train.eval_every": 0, "train.max_steps": 20}),
            small(**{"train.eval_every": 0, "train.max_steps": 20, "model.alpha_min": 0.5,
                     "model.shortcut": "linear"})]
    data = as_float64(build_data(cfgs[0]))
    events = [Events(), Events(stop_at=12)]
    ensemble = EnsembleTrainer(cfgs, [[e] for e in events], data=data)
    ensemble.fit()
    for k, cfg in enumerate(cfgs):
        reference = Events(stop_at=events[k].stop_at)
        alone = solo(cfg, data, [reference])
        assert events[k].log == reference.log
        assert ensemble.members[k].step == alone.step == (20, 12)[k]
        assert rel_error(ensemble.member_model(k), alone.model) <= TOL
    assert ("eval", 12, ["test_acc", "test_loss", "train_acc", "train_loss"]) in events[1].log


def test_member_model_is_an_independent_copy():
    ensemble = EnsembleTrainer([small(), small(**{"model.seed": 1})])
    ensemble.fit(steps=3)
    model = ensemble.member_model(1)
    assert isinstance(model, ResidualMLP) and model.stem.weight.requires_grad
    with torch.no_grad():
        model.stem.weight.zero_()
    assert ensemble.member_model(1).stem.weight.abs().sum() > 0
    assert ensemble.members[1].optimizer.param_groups[0]["lr"] == 0.01
    state = ensemble.members[1].optimizer.state_dict()["state"]
    assert state[0]["step"].item() == 3 and state[0]["exp_avg"].shape == model.stem.weight.shape


def test_groups_split_what_one_ensemble_cannot_vary():
    cfgs = [small(), small(**{"model.alpha_min": 0.5, "train.lr": 0.1}), small(**{"model.depth": 3}),
            small(**{"data.n": 1000, "train.droppath": "residual_droppath"}), small(**{"data.n": 1000})]
    # data.n = 1000: 800 training points, not whole batches of 64, so ResidualDroppath runs 12 batches, not 13
    assert ensemble_groups(cfgs) == [[0, 1], [2], [3], [4]]
    with pytest.raises(ValueError, match="members differ in model.depth"):
        EnsembleTrainer(cfgs[1:3])
    with pytest.raises(ValueError, match="batches per epoch"):
        EnsembleTrainer(cfgs[3:])
    with pytest.raises(ValueError, match="residual_mlp models only"):
        EnsembleTrainer([apply_overrides(ExperimentConfig(), {"model.name": "ra_type1", "data.name": "digits"})])


@pytest.mark.gpu
def test_members_equal_their_solo_runs_on_cuda(float64):
    cfgs = [apply_overrides(c, {"train.device": "cuda"}) for c in members("adam")]
    data = as_float64(build_data(cfgs[0]))
    ensemble = EnsembleTrainer(cfgs, data=data)
    ensemble.fit()
    for k, cfg in enumerate(cfgs):
        alone = solo(cfg, data.to("cuda"))
        assert rel_error(ensemble.member_model(k), alone.model) <= 1e-9, f"member {k}"


def test_members_share_their_weight_decay_rule():
    """One stacked update applies one rule: members that differ in it train in separate ensembles."""
    cfgs = [small(), small(**{"train.weight_decay_on": "all", "train.seed": 1}), small(**{"train.seed": 2})]
    assert shared_settings(cfgs[1])["train.weight_decay_on"] == "all"
    assert ensemble_groups(cfgs) == [[0, 2], [1]]
    with pytest.raises(ValueError, match="train.weight_decay_on"):
        EnsembleTrainer(cfgs[:2])
