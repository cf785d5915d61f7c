"""U-ViT: with α = 1 it is the reference's network (a line-by-line port of its forward runs on the same weights),
its α schedule decays over every sub-layer to the end of the decoder, and its stream is reachable for analysis."""

import math
import sys

import pytest
import torch

from lab.nn.registry import create_model
from lab.nn.uvit import UViT, timestep_embedding


def _reference_forward(m: UViT, x: torch.Tensor, timesteps: torch.Tensor, y=None) -> torch.Tensor:
    """``UViT.forward`` of the reference code (libs/uvit.py), written out on ``m``'s parameters."""
    def embed(t, dim, max_period=10000):  # the reference's timestep_embedding
        half = dim // 2
        freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
        args = t[:, None].float() * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)

    def attention(a, h):  # the reference's Attention, 'math' mode
        B, L, C = h.shape
        qkv = a.qkv(h).reshape(B, L, 3, a.num_heads, C // a.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = ((q @ k.transpose(-2, -1)) * (C // a.num_heads) ** -0.5).softmax(dim=-1)
        return a.proj((attn @ v).transpose(1, 2).reshape(B, L, C))

    def block(b, h, skip_linear=None, skip=None):
        if skip_linear is not None:
            h = skip_linear(torch.cat([h, skip], dim=-1))
        h = h + attention(b.attn, b.norm1(h))
        return h + b.mlp(b.norm2(h))

    h = m.patch_embed.proj(x).flatten(2).transpose(1, 2)
    B, L, D = h.shape
    h = torch.cat([m.time_embed(embed(timesteps, m.embed_dim))[:, None], h], dim=1)
    if y is not None:
        h = torch.cat([m.label_emb(y)[:, None], h], dim=1)
    h = h + m.pos_embed
    skips = []
    for b in m.in_blocks:
        h = block(b, h)
        skips.append(h)
    h = block(m.mid_block, h)
    for b, lin in zip(m.out_blocks, m.skip_linears, strict=True):
        h = block(b, h, lin, skips.pop())
    h = m.decoder_pred(m.norm(h))[:, m.extras:]
    p, C = m.patch_size, m.in_chans
    g = int(h.shape[1] ** 0.5)  # B (h w) (p1 p2 C) -> B C (h p1) (w p2)
    img = h.reshape(B, g, g, p, p, C).permute(0, 5, 1, 3, 2, 4).reshape(B, C, g * p, g * p)
    return m.final_layer(img)


@pytest.mark.parametrize("num_classes", [0, 10])
def test_alpha_one_is_the_reference_uvit(num_classes):
    torch.manual_seed(0)
    m = UViT(img_size=8, patch_size=2, in_chans=3, embed_dim=32, depth=4, num_heads=4, num_classes=num_classes,
             alpha_min=1.0).eval()
    x, t = torch.randn(3, 3, 8, 8), torch.tensor([0.0, 499.5, 999.0])
    y = torch.tensor([1, 4, 9]) if num_classes else None
    torch.testing.assert_close(m(x, t, y), _reference_forward(m, x, t, y), atol=1e-5, rtol=1e-5)
    assert m.extras == (2 if num_classes else 1) and m.pos_embed.shape == (1, m.extras + 16, 32)


@pytest.mark.parametrize("dim", [16, 17, 1])
def test_the_time_embedding_is_the_references(dim):
    """The formula written out: cosines, then sines, of t · 10000^(−k / half), k < half = dim // 2, and a zero column
    for odd ``dim``."""
    t = torch.tensor([0.0, 1.5, 999.0])
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half) / half)
    expected = torch.cat([torch.cos(t[:, None] * freqs), torch.sin(t[:, None] * freqs), torch.zeros(3, dim % 2)],
                         dim=1)
    torch.testing.assert_close(timestep_embedding(t, dim), expected)


@pytest.mark.parametrize("dim", [1, 2, 3, 16, 17, 64, 512])
def test_the_time_embedding_is_diffusers_to_the_bit(dim):
    """The same numbers as diffusers' ``get_timestep_embedding`` as the U-ViT called it before it computed its own."""
    embeddings = pytest.importorskip("diffusers.models.embeddings")
    drawn = torch.rand(64, generator=torch.Generator().manual_seed(0)) * 1000
    t = torch.cat([torch.tensor([0.0, 1e-3, 0.5, 1.5, 999.0]), drawn])
    expected = embeddings.get_timestep_embedding(t, dim, flip_sin_to_cos=True, downscale_freq_shift=0,
                                                 max_period=10000)
    assert torch.equal(timestep_embedding(t, dim), expected)


def test_the_vpsde_uvit_trains_and_samples_without_diffusers(monkeypatch):
    """diffusers is the ``diffusion`` extra's: the core trains and samples the U-ViT on the VP-SDE without it."""
    for name in ["diffusers", *(n for n in sys.modules if n.startswith("diffusers."))]:
        monkeypatch.setitem(sys.modules, name, None)  # import diffusers, or any of its modules, now fails
    with pytest.raises(ImportError):
        import diffusers  # noqa: F401
    model = create_model("uvit_tiny", seed=0, embed_dim=16, depth=2, num_heads=2)
    loss, _ = model(torch.randn(4, 1, 8, 8))
    loss.backward()
    assert model.sample(2, steps=2, generator=torch.Generator().manual_seed(0)).shape == (2, 1, 8, 8)


def test_alpha_decays_over_every_sublayer_to_the_end_of_the_decoder():
    m = UViT(img_size=4, patch_size=2, in_chans=1, embed_dim=16, depth=4, num_heads=2, alpha_min=0.7)
    blocks = [b for _, b in m.iter_blocks()]
    assert [n for n, _ in m.iter_blocks()] == ["in_blocks.0", "in_blocks.1", "mid_block", "out_blocks.0",
                                               "out_blocks.1"]
    got = [a for b in blocks for a in (b.alpha_attn, b.alpha_mlp)]
    assert got == pytest.approx([1 - k * 0.3 / 9 for k in range(10)])  # 2 · 5 sub-layers, 1 → 0.7 inclusive
    assert got[-1] == pytest.approx(0.7)
    # the decayed model is a different function of the same weights
    ref = UViT(img_size=4, patch_size=2, in_chans=1, embed_dim=16, depth=4, num_heads=2, alpha_min=1.0)
    ref.load_state_dict(m.state_dict())
    x, t = torch.randn(2, 1, 4, 4), torch.tensor([10.0, 500.0])
    assert (m(x, t) - ref(x, t)).abs().max() > 1e-3


def test_the_stream_is_every_block_output_and_the_prediction_follows_from_the_last():
    m = UViT(img_size=8, patch_size=2, in_chans=1, embed_dim=16, depth=2, num_heads=2, alpha_min=0.8).eval()
    x, t = torch.randn(2, 1, 8, 8), torch.tensor([3.0, 700.0])
    pred, states = m.forward_intermediates(x, t)
    assert len(states) == 4 and all(h.shape == (2, 17, 16) for h in states)  # h_0, in, mid, out
    torch.testing.assert_close(pred, m(x, t))
    grid = m.forward_intermediates(x, t, indices=[-1], output_fmt="NCHW", intermediates_only=True)
    assert grid[0].shape == (2, 16, 4, 4)
    torch.testing.assert_close(grid[0].flatten(2).transpose(1, 2), states[-1][:, 1:])


def test_labels_are_checked_and_a_null_class_comes_with_label_dropout():
    cond = UViT(img_size=4, patch_size=2, in_chans=1, embed_dim=8, depth=0, num_heads=2, num_classes=5,
                label_dropout=True)
    assert cond.label_emb.num_embeddings == 6 and cond.null_class == 5
    x, t = torch.randn(1, 1, 4, 4), torch.zeros(1)
    with pytest.raises(ValueError, match="needs labels"):
        cond(x, t)
    plain = UViT(img_size=4, patch_size=2, in_chans=1, embed_dim=8, depth=0, num_heads=2)
    with pytest.raises(ValueError, match="takes no labels"):
        plain(x, t, torch.zeros(1, dtype=torch.long))
    with pytest.raises(ValueError, match="even"):
        UViT(depth=3)


def test_registered_sizes_are_the_references():
    """U-ViT-S/2 (13 blocks of 512) has 44 M parameters, U-ViT-M/2 (17 blocks of 768) 131 M (the U-ViT paper's
    Table 1); built on the meta device, so no memory is spent."""
    with torch.device("meta"):
        small, mid = create_model("uvit_small", num_classes=0), create_model("uvit_mid", num_classes=0)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert len(list(small.iter_blocks())) == 13 and small.net.embed_dim == 512
    assert len(list(mid.iter_blocks())) == 17 and mid.net.in_chans == 4
    assert count(small) / 1e6 == pytest.approx(44, abs=1) and count(mid) / 1e6 == pytest.approx(131, abs=1)


def test_zero_init_starts_every_branch_at_zero_after_the_reference_initialisation():
    """§3.2 of the decayed-shortcut paper: for α_min <= 0.7 each block starts as its scaled shortcut."""
    from lab.nn.registry import create_model

    model = create_model("uvit_tiny", seed=0, embed_dim=16, depth=2, num_heads=2, alpha_min=0.7, zero_init=True)
    for _, block in model.iter_blocks():
        assert all(float(p.abs().sum()) == 0.0 for p in (block.attn.proj.weight, block.attn.proj.bias,
                                                         block.mlp.fc2.weight, block.mlp.fc2.bias))
        h = torch.randn(2, 5, 16)
        assert torch.allclose(block(h), block.alpha * h)
    plain = create_model("uvit_tiny", seed=0, embed_dim=16, depth=2, num_heads=2, alpha_min=0.7)
    assert float(plain.net.mid_block.mlp.fc2.weight.abs().sum()) > 0  # the reference U-ViT: off
