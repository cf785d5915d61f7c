"""A block named with --blocks must compute h + F(h): a post-activation block (ReLU after the sum) is refused and its
activation named, from the block's traced code or, where it cannot be traced, from the inputs it receives."""

import pytest
import torch
from torch import nn

from lab.nn.named_blocks import NamedBlocks, check_identity_block
from lab.nn.networks import build_network


@pytest.mark.parametrize(("network", "pattern", "named"), [
    ("timm:resnet18", "layer1.*", r"layer1.0 is no residual block .*act2 \(ReLU\) is applied after the sum"),
    ("torchvision:resnet18", "layer*.*", r"layer1.0 is no residual block .*relu \(ReLU\) is applied after the sum"),
])
def test_post_activation_resnet_blocks_are_refused_with_their_activation_named(network, pattern, named):
    """``--blocks 'layer1.*'`` on a timm ResNet was accepted and gave RA2 0.933 against 0.121 through the adapter:
    block(h) − h = ReLU(h + F(h)) − h is not the branch."""
    raw = build_network(network, num_classes=3)
    with pytest.raises(ValueError, match=named):
        NamedBlocks(raw, pattern)


@pytest.mark.parametrize(("network", "pattern", "count"), [
    ("timm:convnext_atto", "stages.*.blocks.*", 12),
    ("timm:vit_tiny_patch16_224", "blocks.*", 12),
    ("timm:swin_tiny_patch4_window7_224", "layers.*.blocks.*", 12),
    ("timm:resnetv2_50", "stages.*.blocks.[!0]", 12),  # each stage's first block has a projection shortcut
])
def test_pre_norm_blocks_are_taken(network, pattern, count):
    raw = build_network(network, num_classes=3)
    assert len(list(NamedBlocks(raw, pattern).iter_blocks())) == count


class _Untraceable(nn.Module):
    """A block with data-dependent control flow (no symbolic trace), optionally with a ReLU after the sum."""

    def __init__(self, post_relu: bool) -> None:
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.post_relu = post_relu

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        out = h + self.body(h) if h.sum() > -1e9 else h  # data-dependent: fx cannot trace it
        return torch.relu(out) if self.post_relu else out


class _Net(nn.Module):
    def __init__(self, post_relu: bool) -> None:
        super().__init__()
        self.blocks = nn.Sequential(_Untraceable(post_relu), _Untraceable(post_relu))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


def test_an_untraceable_block_is_checked_on_its_inputs():
    assert check_identity_block("b", _Untraceable(True)) is False  # not decidable from the code
    x = torch.randn(16, 8)
    fine = NamedBlocks(_Net(False), "blocks.*")
    assert len(fine.forward_intermediates(x, intermediates_only=True)) == 3
    clamped = NamedBlocks(_Net(True), "blocks.*")
    with pytest.raises(ValueError, match=r"blocks.0 is no residual block .*exactly 0 at \d+% of the entries"):
        clamped.forward_intermediates(x, intermediates_only=True)


class _Projection(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body, self.proj = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.proj(h) + self.body(h)


def test_a_projection_shortcut_is_refused():
    with pytest.raises(ValueError, match="not a sum with its input as one term"):
        check_identity_block("p", _Projection())


def test_a_stages_projection_block_is_refused_and_the_others_taken():
    raw = build_network("timm:resnetv2_50", num_classes=3)
    with pytest.raises(ValueError, match="stages.0.blocks.0 is no residual block .*projection shortcut"):
        NamedBlocks(raw, "stages.*.blocks.*")
