import math

import pytest
import torch

from lab.config import ExperimentConfig, apply_overrides, load_config
from lab.train import Callback, Diverged, Trainer, build_data, build_model
from lab.train.core import droppath_mode
from lab.train.runner import make_trainer


def small(**overrides) -> ExperimentConfig:
    base = {"model.depth": 4, "model.width": 8, "data.n": 512, "train.batch_size": 64, "train.epochs": 2}
    return apply_overrides(ExperimentConfig(), {**base, **overrides})


class Events(Callback):
    def __init__(self):
        self.log = []

    def on_train_start(self, t):
        self.log.append("start")

    def on_step_end(self, t, loss):
        self.log.append(("step", t.step, loss))

    def on_eval_end(self, t, m):
        self.log.append(("eval", t.step, m))

    def on_epoch_end(self, t):
        self.log.append(("epoch", t.epoch))

    def on_train_end(self, t):
        self.log.append("end")


def test_callbacks_order_and_metrics():
    ev = Events()
    t = make_trainer(small(), [ev])
    metrics = t.fit()
    assert t.steps_per_epoch == 7 and t.step == t.total_steps == 14  # 410 train samples / 64 → 7 batches
    assert ev.log[0] == "start" and ev.log[-1] == "end"
    assert [e[1] for e in ev.log if e[0] == "step"] == list(range(1, 15))
    assert [e for e in ev.log if e[0] == "epoch"] == [("epoch", 1), ("epoch", 2)]
    assert set(metrics) == {"train_loss", "train_acc", "test_loss", "test_acc"}
    assert all(math.isfinite(v) for v in metrics.values())


def test_seeds_are_kept_apart():
    base = make_trainer(small())
    other_data = make_trainer(small(**{"data.seed": 1}))
    other_init = make_trainer(small(**{"model.seed": 1}))
    other_batches = make_trainer(small(**{"train.seed": 1}))
    assert torch.equal(base.model.stem.weight, other_data.model.stem.weight)
    assert not torch.equal(base.data.x_train, other_data.data.x_train)
    assert torch.equal(base.data.x_train, other_init.data.x_train)
    assert not torch.equal(base.model.stem.weight, other_init.model.stem.weight)
    assert torch.equal(base.model.stem.weight, other_batches.model.stem.weight)
    assert not torch.equal(base.batch_indices(0), other_batches.batch_indices(0))
    assert torch.equal(base.batch_indices(3), make_trainer(small()).batch_indices(3))


def test_same_config_same_result():
    a, b = make_trainer(small()), make_trainer(small())
    assert a.fit() == b.fit()


def test_resume_continues_exactly(tmp_path):
    cfg = small(**{"train.droppath": "residual_droppath", "train.drop_path_rate": 0.3})
    full = make_trainer(cfg)
    full.fit()
    half = make_trainer(cfg)
    half.fit(steps=5)
    state = half.state_dict()
    torch.save(state, tmp_path / "ck.pt")
    resumed = make_trainer(cfg)
    resumed.load_state_dict(torch.load(tmp_path / "ck.pt", weights_only=True))
    assert resumed.step == 5
    resumed.fit()
    for p, q in zip(full.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)


def test_residual_droppath_uses_equal_batches_and_alternates():
    cfg = small(**{"train.droppath": "residual_droppath", "train.drop_path_rate": 0.5})
    t = make_trainer(cfg)
    assert t.steps_per_epoch == 410 // 64  # drop_last: the odd iteration reuses the mask per sample
    assert [droppath_mode(t.cfg, s) for s in range(4)] == ["rdp_drop", "rdp_train", "rdp_drop", "rdp_train"]
    t.fit()
    assert math.isfinite(t.last_eval["test_loss"])


def test_divergence_is_reported_not_crashed():
    cfg = small(**{"train.optimizer": "sgd", "train.lr": 50.0})
    t = make_trainer(cfg)
    with pytest.raises(Diverged, match=r"diverged at step \d+: loss is nan.*lower the learning rate \(train\.lr=50\)"):
        t.fit()
    assert all(torch.isfinite(p).all() for p in t.model.parameters())  # no update from the bad step


def test_device_auto_is_cpu_without_cuda():
    t = make_trainer(small())
    assert t.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        if not torch.cuda.is_available():
            Trainer(build_model(small()), build_data(small()), small(**{"train.device": "cuda"}).train)
        else:
            raise RuntimeError("CUDA is not available (skipped: CUDA present)")


@pytest.mark.gpu
def test_trains_on_cuda():
    t = make_trainer(small(**{"train.device": "cuda"}))
    t.fit(steps=3)
    assert next(t.model.parameters()).is_cuda


@pytest.mark.slow
def test_lab_default_reaches_98_percent_on_the_spiral():
    cfg = load_config("configs/spiral.yaml")
    assert (cfg.model.depth, cfg.model.width) == (32, 32)
    metrics = make_trainer(cfg).fit()
    assert metrics["test_acc"] >= 0.98, metrics
