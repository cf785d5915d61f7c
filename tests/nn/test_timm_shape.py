"""A library network's shape read off its weights (input channels, head, a ViT's patch and image size) and its
inputs off its library (timm's pretrained_cfg, torchvision's ImageNet transforms), so the file loads strictly."""

import pytest
import timm
import torch
import torchvision

from lab.nn.network_shape import IMAGENET, read_shape
from lab.nn.networks import network_overrides
from lab.nn.registry import create_model, model_parameters
from lab.nn.weights import load_state, read_weights


def _shape(spec: str, net: torch.nn.Module, blocks: str | None = None):
    network = network_overrides(spec, blocks)
    return network, read_shape(network, net.state_dict())


@pytest.mark.parametrize(("arch", "in_chans", "classes"), [("resnet18", 3, 10), ("resnet50d", 1, 7)])
def test_a_timm_resnet_is_rebuilt_as_its_weights_say_and_loads_them_strictly(arch, in_chans, classes, tmp_path):
    net = timm.create_model(arch, pretrained=False, num_classes=classes, in_chans=in_chans)
    torch.save(net.state_dict(), tmp_path / "w.pt")
    network, shape = _shape(f"timm:{arch}", net)
    assert (shape.in_chans, shape.head_classes, shape.img_size) == (in_chans, classes, None)  # resnet50d: conv1.0
    library = shape.library
    assert (library.size, library.mean, library.interpolation, library.source) == (
        224, IMAGENET[0], "bicubic", "timm pretrained_cfg")
    overrides = shape.overrides(model_parameters(network["model.name"])[0])
    assert overrides == {"model.in_chans": in_chans, "model.num_classes": classes}
    model = create_model(network["model.name"], arch=arch, in_chans=in_chans, num_classes=classes)
    assert load_state(model.model, read_weights(tmp_path / "w.pt")).exact


@pytest.mark.parametrize(("kwargs", "grid"), [({"patch_size": 4, "img_size": 32}, 8),
                                               ({"patch_size": 8, "img_size": 24, "reg_tokens": 4}, 3),
                                               ({"img_size": 64, "class_token": False, "global_pool": "avg"}, 4)],
                         ids=["patch4", "registers", "no-class-token"])
def test_a_vits_patch_and_image_size_come_from_its_embeddings(kwargs, grid, tmp_path):
    net = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=5, in_chans=1, **kwargs)
    network, shape = _shape("timm:vit_tiny_patch16_224", net)
    patch = kwargs.get("patch_size", 16)
    assert (shape.in_chans, shape.head_classes, shape.patch_size, shape.img_size) == (1, 5, patch, grid * patch)
    assert shape.library.size == grid * patch and shape.library.mean == (0.5, 0.5, 0.5)
    overrides = shape.overrides(model_parameters("timm_vit")[0])
    assert overrides == {"model.in_chans": 1, "model.num_classes": 5, "model.img_size": grid * patch,
                         "model.patch_size": patch}
    if "reg_tokens" not in kwargs and "class_token" not in kwargs:  # the builder takes the embeddings' own settings
        torch.save(net.state_dict(), tmp_path / "vit.pt")
        model = create_model("timm_vit", arch="vit_tiny_patch16_224", **{k.removeprefix("model."): v
                                                                          for k, v in overrides.items()})
        assert load_state(model.model, read_weights(tmp_path / "vit.pt")).exact


def test_a_torchvision_network_reads_its_stem_and_head_and_torchvisions_own_transforms():
    net = torchvision.models.resnet18(num_classes=3)
    _, shape = _shape("torchvision:resnet18", net)
    assert (shape.in_chans, shape.head_classes) == (3, 3)
    assert (shape.library.size, shape.library.mean, shape.library.std, shape.library.interpolation) == (
        224, IMAGENET[0], IMAGENET[1], "bilinear")
    convnext = torchvision.models.convnext_tiny(num_classes=6)  # through --blocks: first conv, last linear layer
    _, shape = _shape("torchvision:convnext_tiny", convnext, blocks="features.*.*")
    assert (shape.in_chans, shape.head_classes) == (3, 6)


def test_a_file_without_a_stem_or_head_leaves_them_unset_and_a_lab_model_has_no_library_shape():
    _, shape = _shape("timm:resnet18", torch.nn.Linear(2, 2))
    assert (shape.in_chans, shape.head_classes) == (None, None) and shape.library is not None
    _, shape = _shape("residual_mlp", torch.nn.Linear(2, 2))
    assert shape.library is None and shape.overrides({"num_classes": None}) == {}
