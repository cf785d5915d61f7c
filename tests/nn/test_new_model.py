"""The steps of "How to add a model" (docs/extending.md), done once: a new family — a small ConvNeXt-style network
with decayed shortcuts — written as one module would be, registered, then trained from a config and analysed like
any lab model, with no other file touched."""

import pkgutil
import sys

import pytest
import torch
from torch import nn

import lab.nn
from lab.config import load_config
from lab.nn import registry
from lab.nn.block import ResidualBlock
from lab.nn.registry import create_model, list_models, model_info, register_model, signature_of
from lab.nn.resnets import ResNet
from lab.reports.alignment import alignment_report
from lab.runfolder import layout
from lab.runs.store import RunStore
from lab.shortcuts import block_scales
from lab.train.runner import resolved, train_and_evaluate


class ConvNeXtBranch(nn.Module):
    """ConvNeXt's block body: depthwise 7 × 7 → channel norm → pointwise 4× MLP (GELU)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(dim, dim, 7, padding=3, groups=dim), nn.GroupNorm(1, dim),
                                  nn.Conv2d(dim, 4 * dim, 1), nn.GELU(), nn.Conv2d(4 * dim, dim, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class TinyConvNeXt(ResNet):
    """``depth`` ConvNeXt blocks of ``width`` channels whose shortcuts follow a :mod:`lab.shortcuts` schedule."""

    def __init__(self, depth: int = 4, width: int = 16, in_chans: int = 1, num_classes: int = 10,
                 shortcut: str = "identity", alpha_min: float = 1.0, drop_path_rate: float = 0.0) -> None:
        blocks = [ResidualBlock(ConvNeXtBranch(width), alpha, beta, drop_path_rate)
                  for alpha, beta in block_scales(shortcut, depth, alpha_min)]
        super().__init__(nn.Conv2d(in_chans, width, 3, padding=1), blocks, nn.Linear(width, num_classes),
                         pool=nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()))
        self.shortcut_schedule, self.alpha_min = shortcut, alpha_min


@pytest.fixture
def registered(monkeypatch):
    """Step 1: the builder, registered with what the lab should know of it (undone after the test)."""
    monkeypatch.setattr(registry, "_MODELS", dict(registry._MODELS))
    monkeypatch.setattr(registry, "_INFO", dict(registry._INFO))

    @register_model(family="convnext", example={"depth": 2, "width": 8, "num_classes": 3}, input_shape=(1, 8, 8))
    @signature_of(TinyConvNeXt)
    def convnext_decayed(**kwargs) -> TinyConvNeXt:
        return TinyConvNeXt(**kwargs)

    return "convnext_decayed"


def test_every_module_of_lab_nn_is_imported_so_a_new_module_registers_itself():
    modules = {m.name for m in pkgutil.iter_modules(lab.nn.__path__)}
    assert {"mlp", "resnets", "mae", "diffusion", "timm_adapter"} <= modules
    assert all(f"lab.nn.{m}" in sys.modules for m in modules)


def test_a_new_family_trains_from_a_config_and_is_analysed_like_any_model(registered, tmp_path):
    info = model_info(registered)
    assert registered in list_models("convnext*") and (info.family, info.task) == ("convnext", "classify")
    model = create_model(registered, seed=0, **info.example)  # the surface every analysis relies on
    features, states = model.forward_intermediates(torch.randn(2, *info.input_shape))
    assert len(states) == 3 and features.shape == (2, 8)
    # a config names it; its keys are the builder's (shortcut schedules and α_min included), checked strictly
    cfg = resolved(load_config("ra_fc_digits", [f"model.name={registered}", "model.depth=4", "model.width=8",
                                                "model.shortcut=linear", "model.alpha_min=0.5", "train.epochs=2",
                                                "train.lr=0.01"]))
    with pytest.raises(Exception, match="channels"):
        load_config("ra_fc_digits", [f"model.name={registered}", "model.channels=[8]"])
    run = RunStore(tmp_path).create("convnext")
    status = train_and_evaluate(cfg, run, progress=False)
    assert status["state"] == "completed" and status["metrics"]["test_acc"] > 0.1
    alphas = [block.alpha for _, block in create_model(registered, **cfg.model.builder_kwargs()).iter_blocks()]
    assert alphas[0] == 1.0 and alphas[-1] == pytest.approx(0.5)  # the decayed shortcut, from lab.shortcuts
    report = alignment_report(run, inputs=8, nc_inputs=32)  # Residual Alignment on its block Jacobians
    assert len(report["inv_sigma"]) == 4 and run.analysis_path(layout.ALIGNMENT).is_file()
