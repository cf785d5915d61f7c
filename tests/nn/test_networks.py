"""Any residual network by name and weights file: timm's and torchvision's ResNets seen block by block, exactly as
they compute, and a network whose blocks the lab cannot find refused by name."""

import pytest
import torch
import torchvision

from lab.analysis.residual_alignment import residual_alignment
from lab.nn import create_model
from lab.nn.networks import build_network, open_network, residual_steps, residual_view
from lab.nn.weights import WeightsError


@pytest.mark.parametrize("name", ["torchvision:resnet18", "torchvision:resnet50", "timm:resnet18"])
def test_a_library_resnet_is_seen_block_by_block_and_computes_as_the_library_does(name, tmp_path):
    torch.manual_seed(0)
    raw = build_network(name, num_classes=5).eval()
    torch.save({"model": {f"module.{k}": v for k, v in raw.state_dict().items()}}, tmp_path / "w.pt")
    view, report = open_network(name, tmp_path / "w.pt", num_classes=5)
    assert report.exact and report.loaded == len(raw.state_dict())
    x = torch.randn(3, 3, 64, 64)
    with torch.no_grad():
        assert torch.allclose(view(x), raw(x), atol=1e-5), "the view computes what the library's network does"
        states = view.forward_intermediates(x, intermediates_only=True)
    blocks = [b for _, b in view.iter_blocks()]
    assert len(states) == len(blocks) + 1 == {"resnet18": 8, "resnet50": 16}[name.split(":")[1]] + 1
    assert [b.has_projection for b in blocks][:2] == ([False, False] if name.endswith("resnet18") else [True, False])


def test_alignment_is_measured_on_a_torchvision_resnet():
    view, _ = open_network("torchvision:resnet18", num_classes=4)
    x, y = torch.randn(8, 3, 32, 32), torch.arange(8) % 4
    out = residual_alignment(view, x, y, 3, nc_x=x, nc_y=y, num_classes=4, fit_start=0, seed=0)
    assert out["sigma"].shape[0] == 8 and torch.isfinite(torch.as_tensor(out["inv_sigma"])).any()


def test_unknown_names_networks_without_blocks_and_weights_that_do_not_fit_are_refused_by_name(tmp_path):
    for name, words in (("torchvision:resnet_nine", "torchvision has no model"), ("timm:not_a_net", "timm has no"),
                        ("keras:resnet50", "unknown library"), ("no_such", "unknown model 'no_such'")):
        with pytest.raises(ValueError, match=words):
            build_network(name)
    with pytest.raises(ValueError, match=r"cannot find the residual blocks .*features \(Sequential\)"):
        residual_view(torchvision.models.vgg11(weights=None))
    torch.save(torchvision.models.resnet34(weights=None).state_dict(), tmp_path / "r34.pt")
    with pytest.raises(WeightsError, match="unexpected in the file: layer1.2"):
        open_network("torchvision:resnet18", tmp_path / "r34.pt")


def test_a_timm_vit_is_seen_as_two_residual_steps_per_block_and_computes_as_timm_does(tmp_path):
    torch.manual_seed(0)
    raw = build_network("timm:vit_tiny_patch16_224", img_size=32, num_classes=4).eval()
    torch.save(raw.state_dict(), tmp_path / "vit.pt")
    view, report = open_network("timm:vit_tiny_patch16_224", tmp_path / "vit.pt", img_size=32, num_classes=4)
    x, y = torch.randn(6, 3, 32, 32), torch.arange(6) % 4
    with torch.no_grad():
        assert report.exact and torch.allclose(view(x), raw(x), atol=1e-5)
        states = view.forward_intermediates(x, intermediates_only=True)
    steps = [b for _, b in view.iter_blocks()]
    first = view.model.blocks[0]
    assert len(steps) == 2 * 12 and steps[0].branch[1] is first.attn and steps[1].branch[1] is first.mlp
    assert len(states) == 25 and states[0].shape == (6, 5, 192)  # 4 patches and the class token
    out = residual_alignment(view, x, y, 3, nc_x=x, nc_y=y, num_classes=4, fit_start=0, seed=0)
    assert out["sigma"].shape[0] == 24


def test_the_labs_mae_is_seen_as_two_decayed_residual_steps_per_block_computing_its_own_stream():
    torch.manual_seed(0)
    mae = create_model("mae_vit_tiny_patch4_32", depth=3, alpha_min=0.6, zero_init=False).eval()
    view = residual_steps(mae)
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        blocks = mae.forward_intermediates(x, intermediates_only=True)
        steps = view.forward_intermediates(x, intermediates_only=True)
    assert len(steps) == 2 * 3 + 1
    for i, state in enumerate(blocks):  # every block's output is the state after its MLP step
        assert torch.equal(steps[2 * i], state)
    named = [b for _, b in view.iter_blocks()]
    for i, block in enumerate(mae.blocks):  # each step keeps its own decayed α, and the block's β
        attn, mlp = named[2 * i], named[2 * i + 1]
        assert (attn.alpha, mlp.alpha, attn.beta) == (block.alpha_attn, block.alpha_mlp, block.beta)
        assert attn.branch[1] is block.attn and mlp.branch[1] is block.mlp
        with torch.no_grad():  # the attention step alone is α_attn h + β attn(norm1(h))
            h = blocks[i]
            assert torch.allclose(attn(h), block.alpha_attn * h + block.beta * block.attn(block.norm1(h)), atol=1e-6)
    assert named[0].alpha > named[-1].alpha == pytest.approx(0.6)  # the sublayer schedule falls to α_min
    other = create_model("fc_resnet", depth=2, width=8, in_dim=4, num_classes=3)
    assert residual_steps(other) is other


def test_blocks_named_by_pattern_are_seen_as_the_network_runs_them_with_exact_residual_jacobians(tmp_path):
    from lab.analysis.alignment_stats import alignment_stats
    from lab.analysis.jacobian import residual_jacobians
    from lab.nn.named_blocks import NamedBlocks

    torch.manual_seed(0)
    raw = build_network("timm:convnext_atto", num_classes=4).eval()
    view = NamedBlocks(raw, "stages.*.blocks.*")
    names = [b.name for _, b in view.iter_blocks()]
    assert names[:3] == ["stages.0.blocks.0", "stages.0.blocks.1", "stages.1.blocks.0"] and len(names) == 12
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(view(x), raw(x))
        states = view.forward_intermediates(x, intermediates_only=True)
        stage0 = raw.stages[0].blocks
        h0 = raw.stages[0].downsample(raw.stem(x))
        assert torch.allclose(states[0], h0) and torch.allclose(states[1], stage0[0](h0))
        assert torch.allclose(states[-1], raw.stages[3].blocks[-1](states[-2]))
    J = residual_jacobians(view, x[0], blocks=[0])[0]  # the branch's Jacobian: ∂block/∂h − I
    h = states[0][:1]
    full = torch.func.jacfwd(lambda v: stage0[0](v.reshape(h.shape)).flatten())(h.flatten())
    assert torch.allclose(J, full - torch.eye(h.numel()), atol=1e-4)
    stats = alignment_stats(view, x[:2], 3, baseline_trials=2, dense_max_dim=4096)
    assert stats["sigma"].shape == (2, 12, 3) and torch.isfinite(stats["scores"][:, 0, 1]).all()
    with pytest.raises(ValueError, match="matches --blocks 'layers.*'.*stem"):
        NamedBlocks(raw, "layers.*")
    with pytest.raises(ValueError, match="stages.1 is no residual block h .* not a sum with its input"):
        NamedBlocks(raw, "stages.*")  # a stage that downsamples first: no h + F(h) (stage 0's identity is one)
    with pytest.raises(ValueError, match="--blocks PATTERN"):
        residual_view(raw)
    built = create_model("named_blocks", network="timm:convnext_atto", blocks="stages.*.blocks.*", num_classes=4,
                         in_chans=1)
    assert len(list(built.iter_blocks())) == 12


def test_an_input_stage_gives_a_library_network_its_own_inputs_from_the_labs_tensors():
    """The lab's tensors (grey, 8 px, standardised with the data's statistics) become what timm's ResNet was trained
    on, as its library's transform makes them: RGB at 224 px, bicubic, pixels in [0, 1], then its mean and std."""
    from torchvision.transforms.v2 import functional as TF

    from lab.nn.input_stage import InputStage, plan_inputs
    from lab.nn.network_shape import IMAGENET

    torch.manual_seed(0)
    pixels = torch.rand(4, 1, 8, 8)
    mean, std = pixels.mean().item(), pixels.std(correction=0).item()
    lab_tensors = (pixels - mean) / std
    planned = plan_inputs(data="digits", data_channels=1, data_size=8, data_scale=((mean,), (std,)), channels=3,
                          size=224, library=(*IMAGENET, "bicubic", "timm pretrained_cfg"))
    assert planned.normalize == "model" and planned.text == ("digits 8 px → 3 × 224 × 224, grayscale repeated, "
                                                             "normalised with the model's mean/std (timm "
                                                             "pretrained_cfg)")
    model = create_model("timm_resnet", arch="resnet18", num_classes=10, inputs=planned.stage)
    reference = TF.normalize(TF.resize(pixels.expand(-1, 3, -1, -1), [224, 224],
                                       interpolation=TF.InterpolationMode.BICUBIC, antialias=True).clamp(0, 1),
                             list(IMAGENET[0]), list(IMAGENET[1]))
    with torch.no_grad():
        assert torch.allclose(model.input_stage(lab_tensors), reference, atol=1e-5)
        assert torch.allclose(model.eval()(lab_tensors), model.model.eval()(reference), atol=1e-4)
    assert set(model.state_dict()) == {f"model.{k}" for k in model.model.state_dict()}, "the stage saves nothing"
    raw = InputStage(channels=1, pixels=((mean,), (std,)))  # data.normalize=none: the pixels themselves
    assert torch.allclose(raw(lab_tensors), pixels, atol=1e-6)


def test_inputs_a_network_cannot_be_given_are_refused_saying_what_to_choose():
    from lab.nn.input_stage import plan_inputs

    common = {"data": "cifar10", "data_size": 32, "data_scale": ((0.5,) * 3, (0.25,) * 3), "size": 32}
    with pytest.raises(ValueError, match="takes 1 input channels and cifar10 has 3"):
        plan_inputs(data_channels=3, channels=1, library=None, **common)
    with pytest.raises(ValueError, match="the lab's own models take the data's statistics"):
        plan_inputs(data_channels=3, channels=3, library=None, normalize="model", **common)
    with pytest.raises(ValueError, match=r"differ in normalisation .*data.normalize=data"):
        plan_inputs(data_channels=3, channels=3, library=((0.5,) * 3, (0.5,) * 3, "bicubic", "timm"),
                    normalize="none", stage=False, **common)
    with pytest.raises(ValueError, match="one of auto, model, data, none"):
        plan_inputs(data_channels=3, channels=3, library=None, normalize="imagenet", **common)


@pytest.mark.parametrize(("name", "kwargs"), [("timm:resnet18", {"in_chans": 1, "num_classes": 7}),
                                              ("timm:vit_tiny_patch16_224", {"patch_size": 4, "img_size": 32}),
                                              ("torchvision:resnet18", {"num_classes": 7})])
def test_a_network_is_opened_as_its_weights_file_says(name, kwargs, tmp_path):
    raw = build_network(name, **kwargs)
    torch.save(raw.state_dict(), tmp_path / "w.pt")
    view, report = open_network(name, tmp_path / "w.pt")  # no shape given: the file's
    assert report.exact and report.loaded == len(raw.state_dict())
