import pytest
import torch
from torch import nn

from lab.hooks import block_function, branch_function, capture, eval_mode, iter_blocks
from lab.nn import ResidualMLP


def _hook_count(model):
    return sum(len(m._forward_hooks) for m in model.modules())


def test_capture_equals_intermediates_and_removes_hooks():
    model = ResidualMLP(depth=5, width=6).eval()
    x = torch.randn(9, 2)
    with capture(model, points=("input", "output", "branch")) as cap:
        assert _hook_count(model) == 10
        logits = model(x)
    assert _hook_count(model) == 0
    _, states = model.forward_intermediates(x)
    for i in range(5):
        assert torch.equal(cap[f"blocks.{i}.input"], states[i])
        assert torch.equal(cap[f"blocks.{i}.output"], states[i + 1])
        assert torch.allclose(cap[f"blocks.{i}.branch"], model.blocks[i].branch(states[i]))
    assert cap.stack("output").shape == (5, 9, 6)
    assert torch.equal(logits, model(x))


def test_captured_tensors_are_clones():
    model = ResidualMLP(depth=2, width=3).eval()
    with capture(model, points=("output",)) as cap:
        out = model.forward_intermediates(torch.randn(4, 2))[1]
    out[1].add_(100.0)
    assert not torch.equal(cap["blocks.0.output"], out[1])


def test_hooks_removed_when_body_raises_and_selection_works():
    model = ResidualMLP(depth=4, width=3)
    with pytest.raises(RuntimeError, match="boom"), capture(model):
        raise RuntimeError("boom")
    assert _hook_count(model) == 0
    with capture(model, points=("output",), blocks=[1, 3]) as cap:
        model(torch.randn(2, 2))
        model(torch.randn(3, 2))
    assert sorted(cap.keys()) == ["blocks.1.output", "blocks.3.output"]
    assert cap["blocks.1.output"].shape == (5, 3)  # two calls concatenated
    with pytest.raises(KeyError, match="nothing captured at 'blocks.0.output'"):
        cap["blocks.0.output"]
    with pytest.raises(ValueError, match="unknown capture point"), capture(model, points=("weights",)):
        pass


def test_block_and_branch_functions():
    model = ResidualMLP(depth=3, width=4).eval()
    _, states = model.forward_intermediates(torch.randn(2, 2))
    assert torch.allclose(block_function(model, 1)(states[1]), states[2])
    assert torch.allclose(branch_function(model, 1)(states[1]), states[2] - states[1])
    assert [n for n, _ in iter_blocks(model)] == ["blocks.0", "blocks.1", "blocks.2"]
    with pytest.raises(IndexError):
        block_function(model, 3)
    with pytest.raises(TypeError, match="iter_blocks"):
        list(iter_blocks(torch.nn.Linear(2, 2)))


def test_eval_mode_restores_every_modules_own_flag():
    model = ResidualMLP(depth=3, width=4, drop_path_rate=0.5).train()
    model.blocks[1].eval()  # a mixed state must survive
    with eval_mode(model):
        assert not any(m.training for m in model.modules())
        assert not model.blocks[0].drop_path.active
    assert model.training and not model.blocks[1].training and model.blocks[2].training
    with pytest.raises(RuntimeError), eval_mode(model):
        raise RuntimeError
    assert model.blocks[0].training


def test_eval_mode_reaches_block_views_outside_the_module_tree():
    """An adapter may hand out block views that are not its submodules; analyses need them in eval mode too."""

    class Adapter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Linear(2, 2)
            self._views = [nn.Sequential(nn.BatchNorm1d(2), nn.Dropout(0.5))]  # a plain list: not registered

        def iter_blocks(self):
            return iter([("blocks.0", v) for v in self._views])

    model = Adapter().train()
    view = model._views[0].train()
    view[1].eval()  # a mixed flag inside the view survives
    with eval_mode(model):
        assert not model.training and not any(m.training for m in view.modules())
    assert model.training and view.training and view[0].training and not view[1].training


def test_eval_mode_switches_fused_attention_to_the_plain_path_and_back():
    """Forward-mode AD has no rule for fused attention kernels: analyses under eval_mode get the plain path."""

    class Attention(nn.Module):
        def __init__(self, fused: bool) -> None:
            super().__init__()
            self.fused_attn = fused

    model = nn.Sequential(Attention(True), Attention(False), nn.Linear(2, 2))
    with eval_mode(model):
        assert [model[0].fused_attn, model[1].fused_attn] == [False, False]
    assert [model[0].fused_attn, model[1].fused_attn] == [True, False]
    with pytest.raises(RuntimeError), eval_mode(model):
        raise RuntimeError
    assert model[0].fused_attn is True
