"""Weights written elsewhere (timm's, torchvision's, a DDP run's, a release's ``{"model": …}``), loaded safely: only
tensors, the common layouts unwrapped, every key that does not fit named."""

import pytest
import timm
import torch
import torchvision
from safetensors.torch import save_file

from lab.nn.weights import LISTED, WeightsError, load_weights, read_state_dict


class Hook:
    """An object of a class of its own, pickled beside weights (as a checkpoint may carry a callback)."""


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


@pytest.mark.parametrize("layout", ["plain", "release", "ddp", "compiled", "safetensors"])
def test_a_timm_resnet_comes_back_whole_from_each_layout(tmp_path, layout):
    torch.manual_seed(0)
    source = timm.create_model("resnet18", pretrained=False, num_classes=10)
    state = source.state_dict()
    path = tmp_path / ("w.safetensors" if layout == "safetensors" else "w.pt")
    if layout == "safetensors":
        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    else:
        prefix = {"ddp": "module.", "compiled": "_orig_mod."}.get(layout, "")
        state = {f"{prefix}{k}": v for k, v in state.items()}
        torch.save({"model": state, "epoch": 799} if layout == "release" else state, path)
    target = timm.create_model("resnet18", pretrained=False, num_classes=10)
    assert not _same(source, target)
    report = load_weights(target, path)
    assert report.exact and report.loaded == len(source.state_dict()) and _same(source, target)


def test_a_torchvision_resnet_loads_and_a_file_of_pickled_objects_is_refused(tmp_path):
    source = torchvision.models.resnet18(num_classes=10)
    torch.save(source.state_dict(), tmp_path / "tv.pt")
    target = torchvision.models.resnet18(num_classes=10)
    assert load_weights(target, tmp_path / "tv.pt").exact and _same(source, target)
    torch.save(source, tmp_path / "whole.pt")  # the model object itself: unpickling it would run code
    with pytest.raises(WeightsError, match="pickled objects"):
        read_state_dict(tmp_path / "whole.pt")
    torch.save({"model": source.state_dict(), "hook": Hook()}, tmp_path / "hooked.pt")  # weights beside an object
    with pytest.raises(WeightsError, match="pickled objects"):
        read_state_dict(tmp_path / "hooked.pt")
    (tmp_path / "torn.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{bad")
    with pytest.raises(WeightsError, match="not a readable safetensors"):
        read_state_dict(tmp_path / "torn.safetensors")
    with pytest.raises(FileNotFoundError):
        read_state_dict(tmp_path / "absent.pt")


def test_keys_that_do_not_fit_are_named_and_refused_unless_not_strict(tmp_path):
    torch.save(timm.create_model("resnet34", pretrained=False, num_classes=5).state_dict(), tmp_path / "r34.pt")
    target = timm.create_model("resnet18", pretrained=False, num_classes=10)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(WeightsError) as refused:
        load_weights(target, tmp_path / "r34.pt")
    message = str(refused.value)
    assert "unexpected in the file: layer1.2.conv1.weight" in message and "more" in message
    assert "of another shape: fc.weight: (5, 512) ≠ (10, 512)" in message and "strict=False" in message
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items()), "a refused load changes nothing"
    report = load_weights(target, tmp_path / "r34.pt", strict=False)
    assert not report.exact and len(report.unexpected) > LISTED and report.mismatched == ["fc.weight: (5, 512) ≠ "
                                                                                           "(10, 512)", "fc.bias: "
                                                                                           "(5,) ≠ (10,)"]
    assert torch.equal(target.state_dict()["conv1.weight"], torch.load(tmp_path / "r34.pt")["conv1.weight"])
    assert torch.equal(target.state_dict()["fc.bias"], before["fc.bias"]), "a mismatched key keeps the model's own"
    torch.save({"epoch": 3, "note": "no weights"}, tmp_path / "empty.pt")
    with pytest.raises(WeightsError, match="no state dict of tensors"):
        read_state_dict(tmp_path / "empty.pt")
