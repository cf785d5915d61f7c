"""One weight-decay rule for every trainer: by default timm's (no decay on norms, biases and a model's
``no_weight_decay()``), or every parameter with ``train.weight_decay_on=all``. The ensemble's stacked update is
pinned to the same rule by its exact-equivalence test (tests/train/test_ensemble.py)."""

import pytest
import torch
from torch import nn

from lab.config import ExperimentConfig, apply_overrides
from lab.train.build import build_data, build_model, loader_data
from lab.train.distributed import World
from lab.train.loader import LoaderTrainer
from lab.train.optim import decayed, make_optimizer, param_groups
from lab.train.tensor import Trainer

LR, WD = 0.1, 0.5


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos_embed = nn.Parameter(torch.zeros(1, 4))
        self.fc = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)

    def no_weight_decay(self) -> set[str]:
        return {"pos_embed"}


def test_weights_rule_spares_norms_biases_and_the_models_exemptions():
    model = _Tiny()
    decay, spared = param_groups(model, 0.05)
    assert decay["weight_decay"] == 0.05 and spared["weight_decay"] == 0.0
    assert {id(p) for p in decay["params"]} == {id(model.fc.weight)}
    assert {id(p) for p in spared["params"]} == {id(model.pos_embed), id(model.fc.bias), id(model.norm.weight),
                                                 id(model.norm.bias)}
    assert decayed(model) == {"pos_embed": False, "fc.weight": True, "fc.bias": False, "norm.weight": False,
                              "norm.bias": False}


def test_all_rule_decays_every_parameter_in_one_group():
    model = _Tiny()
    (group,) = param_groups(model, 0.05, "all")
    assert group["weight_decay"] == 0.05
    assert [id(p) for p in group["params"]] == [id(p) for p in model.parameters()]
    assert all(decayed(model, "all").values())


def test_no_decay_is_one_group_in_module_order_as_timms():
    from timm.optim import param_groups_weight_decay

    model = _Tiny()
    (group,) = make_optimizer(model, ExperimentConfig().train).param_groups
    assert group["weight_decay"] == 0.0 and [id(p) for p in group["params"]] == [id(p) for p in model.parameters()]
    (timms,) = param_groups_weight_decay(model, 0.0, no_weight_decay_list=model.no_weight_decay())
    assert timms["weight_decay"] == 0.0 and [id(p) for p in timms["params"]] == [id(p) for p in group["params"]]


def _cfg(engine: str, rule: str) -> ExperimentConfig:
    return apply_overrides(ExperimentConfig(), {
        "model.name": "fc_resnet", "model.depth": 2, "model.width": 8, "data.n": 256, "data.workers": 0,
        "train.engine": engine, "train.optimizer": "sgd", "train.momentum": 0.0, "train.lr": LR,
        "train.weight_decay": WD, "train.weight_decay_on": rule, "train.batch_size": 64})


def _trainer(engine: str, rule: str) -> Trainer | LoaderTrainer:
    cfg = _cfg(engine, rule)
    if engine == "tensor":
        data = build_data(cfg)
        return Trainer(build_model(cfg, data), data, cfg.train)
    data = loader_data(cfg)
    return LoaderTrainer(build_model(cfg, data), data, cfg.train, cfg.data, World())


@pytest.mark.parametrize("engine", ["tensor", "loader"])
@pytest.mark.parametrize("rule", ["weights", "all"])
def test_one_sgd_step_decays_what_the_rule_says(engine, rule):
    """After one SGD step (no momentum) each parameter is θ − lr·(g + λθ) where the rule decays it and θ − lr·g
    where it does not: biases and BatchNorm scales move by their gradient alone under ``weights``."""
    trainer = _trainer(engine, rule)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    grads: dict[str, torch.Tensor] = {}
    for name, p in trainer.model.named_parameters():
        p.register_hook(lambda g, name=name: grads.__setitem__(name, g.detach().clone()))
    trainer.fit(steps=1)
    assert trainer.step == 1 and grads.keys() == before.keys()
    decays = decayed(trainer.model, rule)
    assert "head.bias" in before  # a bias and a norm's scale are among them
    assert any(p.ndim == 1 and not n.endswith(".bias") for n, p in before.items())
    for name, p in trainer.model.named_parameters():
        ndim_one = before[name].ndim <= 1
        assert decays[name] == (rule == "all" or not ndim_one), name
        expected = before[name] - LR * (grads[name] + (WD * before[name] if decays[name] else 0.0))
        assert torch.allclose(p.detach(), expected, rtol=1e-5, atol=1e-7), name
        undecayed = before[name] - LR * grads[name]
        if before[name].abs().max() > 1e-3:  # the decay term is visible: the other rule would fail here
            assert not torch.allclose(p.detach(), undecayed if decays[name] else undecayed - LR * WD * before[name],
                                      rtol=1e-5, atol=1e-7), name


@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd"])
def test_the_foreach_update_is_pytorchs_per_parameter_update(optimizer):
    """The lab's optimisers use the foreach kernels on the CPU (faster for many small tensors); three steps land
    where PyTorch's default per-parameter loop lands."""
    cfg = apply_overrides(ExperimentConfig(), {"train.optimizer": optimizer, "train.lr": 0.05, "train.momentum": 0.9,
                                               "train.weight_decay": 0.01}).train
    torch.manual_seed(0)
    fast = nn.Sequential(nn.Linear(3, 8), nn.GELU(), nn.Linear(8, 2))
    slow = nn.Sequential(nn.Linear(3, 8), nn.GELU(), nn.Linear(8, 2))
    slow.load_state_dict(fast.state_dict())
    initial = [p.detach().clone() for p in fast.parameters()]
    opt_fast = make_optimizer(fast, cfg)
    assert all(g.get("foreach") is True for g in opt_fast.param_groups)
    kind = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[optimizer]
    extra = {"momentum": cfg.momentum} if optimizer == "sgd" else {"betas": cfg.betas}
    opt_slow = kind(param_groups(slow, cfg.weight_decay, cfg.weight_decay_on), lr=cfg.lr, foreach=False, **extra)
    x, y = torch.randn(16, 3), torch.randint(0, 2, (16,))
    for model, opt in ((fast, opt_fast), (slow, opt_slow)):
        for _ in range(3):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    assert all(not torch.equal(p, p0) for p, p0 in zip(fast.parameters(), initial, strict=True))
    for a, b in zip(fast.parameters(), slow.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
