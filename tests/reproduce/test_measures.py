"""What each corrected claim measures, pinned on hand-made cases: neural collapse followed over training, the
Eq. 6 rank of an ensemble's members over training, RA3 on the fully-connected network only."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from lab.analysis.collapse import collapse_metrics
from lab.analysis.rank import feature_rank
from lab.config import ExperimentConfig, apply_overrides
from lab.reproduce.alignment import CollapseOverTraining, claims_of
from lab.reproduce.decayed import RankOverTraining
from lab.train.ensemble import EnsembleTrainer


class _Collapsing(nn.Module):
    """Features of two classes whose within-class spread shrinks as ``scale`` is set smaller, read by a fixed head."""

    def __init__(self, y: torch.Tensor) -> None:
        super().__init__()
        self.y, self.scale = y, nn.Parameter(torch.tensor(1.0))
        self.noise = torch.randn(len(y), 4, generator=torch.Generator().manual_seed(0))
        self.head = nn.Linear(4, 2)
        with torch.no_grad():
            self.head.weight.copy_(torch.eye(4)[:2])

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        means = torch.eye(4)[self.y] * 3.0
        return means + self.scale.detach() * self.noise

    def forward_intermediates(self, x: torch.Tensor, intermediates_only: bool = True) -> list[torch.Tensor]:
        return [self.forward_features(x)]


def test_neural_collapse_is_followed_after_every_evaluation():
    """NC1–NC4 of the last layer, with the model's head as the classifier, after every evaluation (Figure 7)."""
    y = torch.arange(40) % 2
    model = _Collapsing(y)
    follow = CollapseOverTraining(torch.zeros(40, 1), y)
    trainer = SimpleNamespace(model=model, step=0)
    with torch.no_grad():
        model.scale.fill_(3.0)
    follow.on_train_start(trainer)  # the network at initialisation: where the curve starts
    follow.on_train_start(trainer)  # a resumed training adds no second start
    for step, scale in ((10, 1.0), (20, 0.3), (30, 0.05)):
        trainer.step = step
        with torch.no_grad():
            model.scale.fill_(scale)
        follow.on_eval_end(trainer, {})
    assert [s for s, _ in follow.curve] == [0, 10, 20, 30]
    nc1 = [v["nc1"] for _, v in follow.curve]
    assert nc1[0] > nc1[1] > nc1[2] > nc1[3]  # the classes collapse onto their means
    h = model.forward_features(None)
    expected = collapse_metrics(h, y, classifier_weight=model.head.weight, classifier_bias=model.head.bias)
    assert follow.curve[-1][1] == pytest.approx({k: expected[k] for k in follow.curve[-1][1]}, nan_ok=True)
    assert {"nc1", "nc2_equinorm", "nc2_maxangle", "nc3", "nc4"} <= set(follow.curve[-1][1])


def test_the_rank_over_training_is_eq6_of_each_members_last_layer():
    cfgs = [apply_overrides(ExperimentConfig(), {"model.depth": 3, "model.width": 8, "data.n": 256,
                                                  "train.epochs": 2, "model.shortcut": "linear",
                                                  "model.alpha_min": a}) for a in (1.0, 0.5)]
    ensemble = EnsembleTrainer(cfgs)
    x = ensemble.data.x_test[:64]
    follow = RankOverTraining(x)
    ensemble.group_callbacks.append(follow)
    ensemble.fit()
    assert len(follow.curve) == 2  # an evaluation per epoch
    step, ranks = follow.curve[-1]
    assert step == ensemble.step
    for k in (0, 1):
        with torch.no_grad():
            features = ensemble.member_model(k).eval().forward_features(x)
        # Eq. 6: entropy of the singular values of the sample-by-sample covariance of the centred features
        centred = features.double() - features.double().mean(dim=1, keepdim=True)
        s = torch.linalg.svdvals(centred @ centred.T)
        p = s / s.sum()
        member = (cfgs[k].model.alpha_min, cfgs[k].model.seed)  # each member named by its α_min and seed
        assert ranks[member] == pytest.approx(float(-(p * p.clamp_min(1e-300).log()).sum()), rel=1e-6)
        assert ranks[member] == pytest.approx(float(feature_rank(features.double(), measure="entropy")), rel=1e-6)


def test_ra3_is_claimed_of_the_fully_connected_network_only():
    assert [c.id for c in claims_of("fc")] == ["alignment.ra1.fc", "alignment.ra2.fc", "alignment.ra3.fc",
                                              "alignment.ra4.fc", "alignment.nc.fc"]
    assert "alignment.ra3.conv" not in [c.id for c in claims_of("conv")]
    assert claims_of("fc")[4].where == "Figure 7" and "over training" in claims_of("fc")[4].statement
