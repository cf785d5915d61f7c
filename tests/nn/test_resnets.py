"""The ResNet types of *Residual Alignment: Uncovering the Mechanisms of Residual Networks* and the timm adapter:
the model surface, skips, stochastic depth, block views."""

import pytest
import timm
import torch

from lab.hooks import capture
from lab.nn.registry import create_model, list_models
from lab.nn.resnets import ConvResNet, FCResNet
from lab.nn.timm_adapter import TimmResNet, set_drop_path

# Each registered type at a test size: (overrides, input shape, blocks, residual stream shape per stage).
FC = {"width": 16, "in_dim": 64}
CONV = {"in_chans": 1, "feature_size": 4}
TYPES = {
    "fc_resnet": ({**FC, "depth": 3}, (64,), 3, [(16,)]),
    "ra_type1": (FC, (1, 8, 8), 16, [(16,)]),
    "ra_type4a": (FC, (64,), 8, [(16,)]),
    "ra_type4b": (FC, (64,), 8, [(16,)]),
    "conv_resnet": ({**CONV, "depths": (1, 2), "channels": (4, 6)}, (1, 8, 8), 3, [(4, 4, 4), (6, 2, 2)]),
    "ra_type2": ({**CONV, "channels": (4,)}, (1, 8, 8), 16, [(4, 4, 4)]),
    "ra_type3": ({**CONV, "channels": (4, 8)}, (1, 8, 8), 16, [(4, 4, 4), (8, 2, 2)]),
    "ra_type5a": ({**CONV, "channels": (4,)}, (1, 8, 8), 8, [(4, 4, 4)]),
    "ra_type5b": ({**CONV, "channels": (4,)}, (1, 8, 8), 8, [(4, 4, 4)]),
}
NO_SKIP = ("ra_type4b", "ra_type5b")


def post(block: torch.nn.Module, z: torch.Tensor) -> torch.Tensor:
    """The block's post-activation applied to z (None: a pre-activation block)."""
    return z if block.post_act is None else block.post_act(z)


def build(name: str, **extra) -> torch.nn.Module:
    overrides, *_ = TYPES[name]
    return create_model(name, seed=0, num_classes=3, **{**overrides, **extra})


def test_every_type_is_registered():
    assert set(TYPES) <= set(list_models())


@pytest.mark.parametrize("preact", [False, True])
@pytest.mark.parametrize("name", list(TYPES))
def test_model_surface_shapes(name, preact):
    model = build(name, preact=preact).eval()
    _, in_shape, depth, stages = TYPES[name]
    x = torch.randn(5, *in_shape)
    with torch.no_grad():
        pooled, states = model.forward_intermediates(x)
        features = model.forward_features(x)
        logits = model.forward_head(pooled)
        assert torch.equal(pooled, features)
        assert torch.allclose(model(x), logits)
        assert torch.allclose(model.forward_head(features), logits)
        assert model.forward_intermediates(x, intermediates_only=True)[-1].shape == states[-1].shape
    assert logits.shape == (5, 3)
    assert features.shape == (5, stages[-1][0])
    assert [n for n, _ in model.iter_blocks()] == [f"blocks.{i}" for i in range(depth)]
    assert len(states) == depth + 1
    shapes = {tuple(h.shape[1:]) for h in states}
    assert shapes == set(stages)  # transitions change the stage; blocks never change the shape
    blocks = [b for _, b in model.iter_blocks()]
    with torch.no_grad():
        for i, block in enumerate(blocks):
            assert block(states[i]).shape == states[i].shape  # every analysed block maps a space to itself
        assert torch.allclose(blocks[-1](states[-2]), states[-1])
    assert (blocks[0].post_act is None) == preact


def test_type3_has_one_transition_that_is_not_a_block():
    model = build("ra_type3")
    assert list(model.transitions) == ["8"]
    assert all(b is not model.transitions["8"] for _, b in model.iter_blocks())


def test_paper_sizes():
    t1 = create_model("ra_type1")
    assert isinstance(t1, FCResNet) and (t1.depth, t1.width) == (16, 512)
    t3 = create_model("ra_type3", in_chans=3)
    assert isinstance(t3, ConvResNet) and t3.depths == (8, 8) and t3.channels == (64, 128)
    with torch.no_grad():
        states = t3.eval().forward_intermediates(torch.randn(1, 3, 32, 32), intermediates_only=True)
    assert states[0].shape == (1, 64, 16, 16) and states[-1].shape == (1, 128, 8, 8)


@pytest.mark.parametrize("name", NO_SKIP)
def test_none_shortcut_removes_the_skip(name):
    model = build(name).eval()
    _, in_shape, *_ = TYPES[name]
    with torch.no_grad():
        states = model.forward_intermediates(torch.randn(4, *in_shape), intermediates_only=True)
        for i, (_, block) in enumerate(model.iter_blocks()):
            assert block.alpha == 0.0
            h = states[i]
            assert torch.allclose(block(h), post(block, block.branch(h)))


def test_shortcut_schedule_reaches_every_block():
    model = build("ra_type3", shortcut="linear", alpha_min=0.5)
    alphas = [b.alpha for _, b in model.iter_blocks()]
    assert alphas[0] == 1.0 and alphas[-1] == pytest.approx(0.5) and len(alphas) == 16


def test_zero_init_makes_blocks_their_shortcut():
    for name, preact in (("ra_type4a", False), ("ra_type5a", True)):
        model = build(name, zero_init=True, preact=preact).eval()
        _, in_shape, *_ = TYPES[name]
        with torch.no_grad():
            states = model.forward_intermediates(torch.randn(3, *in_shape), intermediates_only=True)
            for i, (_, block) in enumerate(model.iter_blocks()):
                assert torch.equal(block.branch(states[i]), torch.zeros_like(states[i]))
                assert torch.allclose(states[i + 1], post(block, states[i]))


def test_drop_path_rate_is_stochastic_depth_in_train_and_identity_in_eval():
    p = 0.5
    model = build("ra_type4a", drop_path_rate=p, preact=True)  # pre-activation: the sum is visible, no ReLU after it
    block = model.blocks[2]
    h = torch.randn(256, 16)
    with torch.no_grad():
        model.train()
        out = block(h)
        f = block.branch(h)  # BatchNorm in train mode: same batch, same statistics
        dropped = torch.isclose(out, h).all(dim=1)
        kept = torch.isclose(out, h + f / (1 - p), atol=1e-6).all(dim=1)
        assert bool((dropped | kept).all())
        assert 0.3 < dropped.float().mean().item() < 0.7
        model.eval()
        assert torch.allclose(block(h), h + block.branch(h))


# timm adapter ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def r18() -> TimmResNet:
    return create_model("timm_resnet18", seed=0, num_classes=5).eval()


def test_timm_block_counts_and_projections(r18):
    assert [n for n, _ in r18.iter_blocks()] == [f"blocks.{i}" for i in range(8)]
    assert [b.has_projection for _, b in r18.iter_blocks()] == [False, False, True, False, True, False, True, False]
    r50 = create_model("timm_resnet50", num_classes=5)
    assert len(list(r50.iter_blocks())) == 16
    assert sum(b.has_projection for _, b in r50.iter_blocks()) == 4  # stage 1 projects 64 -> 256 channels too


def test_timm_intermediates_match_timm(r18):
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        features, states = r18.forward_intermediates(x)
        logits = r18.forward_head(features)
        assert len(states) == 9
        assert torch.allclose(states[-1], r18.model.forward_features(x))
        assert torch.allclose(logits, r18.model(x), atol=1e-6)
        assert torch.allclose(r18(x), logits)
        blocks = [b for _, b in r18.iter_blocks()]
        for i, block in enumerate(blocks):  # the view's equation equals timm's own block forward
            h = states[i]
            assert torch.allclose(block.block(h.clone()), states[i + 1])
            assert torch.allclose(block.post_act(block.shortcut(h) + block.branch(h)), states[i + 1])
    assert set(r18.state_dict()) == {f"model.{k}" for k in r18.model.state_dict()}


def test_timm_resnet50d_builds_and_captures():
    model = create_model("timm_resnet", arch="resnet50d", num_classes=4).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad(), capture(model, points=("input", "output", "branch")) as rec:
        model(x)
        ref = model.model.forward_features(x)
    assert len(rec.keys()) == 3 * 16
    assert torch.allclose(rec["blocks.15.output"], ref)


def test_timm_drop_path_rates_and_train_eval():
    model = create_model("timm_resnet18", num_classes=3, drop_path_rate=0.3)
    rates = [0.0 if b.drop_path is None else b.drop_path.rate for _, b in model.iter_blocks()]
    assert rates == pytest.approx([0.3 * i / 7 for i in range(8)])
    assert set_drop_path(model, 0.4, schedule="constant") == [0.4] * 8
    x = torch.randn(8, 3, 32, 32)
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(x), model(x))
        model.train()
        block = [b for _, b in model.iter_blocks()][3]
        h = torch.randn(64, 128, 4, 4)
        keep = block.drop_path(torch.ones(64, 1, 1, 1)).flatten()  # timm's rule: dropped 0, kept 1 / (1 - p)
        assert torch.allclose(keep.unique(), torch.tensor([0.0, 1 / 0.6]))
        assert not torch.equal(block(h), block(h))
    assert model.training and all(b.training for _, b in model.iter_blocks())


def test_set_drop_path_on_lab_model():
    model = build("ra_type4a")
    assert set_drop_path(model, 0.2, schedule="linear")[-1] == pytest.approx(0.2)
    assert model.blocks[0].drop_path.rate == 0.0 and model.blocks[-1].drop_path.rate == pytest.approx(0.2)


def test_timm_adapter_never_downloads(monkeypatch):
    calls = []
    real = timm.create_model
    monkeypatch.setattr(timm, "create_model", lambda *a, **k: calls.append(k) or real(*a, **k))
    create_model("timm_resnet18", num_classes=2)
    assert calls and calls[0]["pretrained"] is False
