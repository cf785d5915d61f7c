import pytest
import torch

from lab.nn import DropPath, ResidualMLP, set_droppath_mode


def test_droppath_is_per_sample_and_rescaled_like_timm():
    dp = DropPath(0.25).train()
    dp.generator = torch.Generator().manual_seed(0)
    x = torch.ones(20000, 3)
    y = dp(x)
    row_values = y[:, 0]
    assert torch.all(y == y[:, :1])  # one decision per sample
    assert row_values.unique().tolist() == pytest.approx([0.0, 1 / 0.75])
    assert (row_values == 0).float().mean().item() == pytest.approx(0.25, abs=0.01)
    assert y.mean().item() == pytest.approx(1.0, abs=0.02)  # expectation preserved
    assert torch.equal(dp.eval()(x), x)


def test_residual_droppath_drop_iteration_does_not_rescale_and_remembers_mask():
    dp = DropPath(0.5).train()
    dp.mode = "rdp_drop"
    y = dp(torch.ones(1000, 2))
    assert set(y.unique().tolist()) == {0.0, 1.0}
    assert torch.equal(dp.mask.squeeze(1), y[:, 0])
    dp.mode = "rdp_train"
    x = torch.randn(1000, 2)
    assert torch.allclose(dp(x), x)  # forward value is the full branch
    with pytest.raises(RuntimeError, match="same batch size"):
        dp(torch.randn(3, 2))


def _branch_grads(model, x, y, mode, gen=None):
    set_droppath_mode(model, mode, gen)
    model.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss, [b.branch.fc.weight.grad.clone() for b in model.blocks]


def test_residual_droppath_gradient_semantics():
    """Algorithm 1, line 16: in the odd iteration a block kept for every sample gets no gradient, although its
    output still shapes the loss; a block dropped for some samples gets gradient (from those samples alone)."""
    torch.manual_seed(0)
    model = ResidualMLP(depth=3, width=8, drop_path_rate=0.5).train()
    x, y = torch.randn(16, 2), torch.randint(0, 2, (16,))
    _branch_grads(model, x, y, "rdp_drop", torch.Generator().manual_seed(1))
    kept_all, dropped_all, mixed = model.blocks[0].drop_path, model.blocks[1].drop_path, model.blocks[2].drop_path
    kept_all.mask = torch.ones(16, 1)
    dropped_all.mask = torch.zeros(16, 1)
    mixed.mask = (torch.arange(16) % 2).float()[:, None]  # odd samples kept, even dropped

    loss, grads = _branch_grads(model, x, y, "rdp_train")
    assert torch.count_nonzero(grads[0]) == 0  # kept everywhere: frozen
    assert torch.count_nonzero(grads[1]) > 0  # dropped everywhere: trained
    assert torch.count_nonzero(grads[2]) > 0
    # the frozen block's output still shapes the loss: perturbing its weights changes the loss
    with torch.no_grad():
        model.blocks[0].branch.fc.weight.add_(0.5)
        set_droppath_mode(model, "rdp_train")
        assert not torch.allclose(torch.nn.functional.cross_entropy(model(x), y), loss)
        model.blocks[0].branch.fc.weight.sub_(0.5)
    # the mixed block's gradient equals the gradient of the dropped samples alone (kept ones contribute none)
    set_droppath_mode(model, "off")
    model.zero_grad()
    h = model.stem(x)
    for i, block in enumerate(model.blocks):
        f = block.branch(h)
        if i == 0:
            f = f.detach()
        if i == 2:
            f = torch.where(mixed.mask.bool(), f.detach(), f)
        h = h + f
    torch.nn.functional.cross_entropy(model.head(h), y).backward()
    assert torch.allclose(model.blocks[2].branch.fc.weight.grad, grads[2], atol=1e-6)


def test_plain_droppath_forward_drops_and_eval_is_identity():
    model = ResidualMLP(depth=4, width=4, drop_path_rate=0.5)
    x = torch.randn(32, 2)
    model.eval()
    ref = model(x)
    set_droppath_mode(model, "off")
    model.train()
    assert torch.allclose(model(x), ref)
    set_droppath_mode(model, "droppath", torch.Generator().manual_seed(0))
    assert not torch.allclose(model(x), ref)
