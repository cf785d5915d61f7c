"""A network the lab did not train, imported as a run folder: built as its weights say, given the inputs it was
trained on, its weights read from its own file (never copied), and nothing written when anything is refused."""

import json

import pytest
import timm
import torch
from torchvision.transforms.v2 import functional as TF

import lab
from lab.config import config_of_run
from lab.nn.network_shape import IMAGENET
from lab.reports.alignment import load_trained
from lab.reports.imported import import_weights
from lab.runfolder import layout
from lab.runs.store import CheckpointError, RunStore
from lab.train.build import build_model, raw_images
from lab.train.checkpoint import load_checkpoint


def _record(run) -> dict:
    return json.loads((run.path / layout.CONFIG).read_text())["imported"]


def _folders(runs) -> list:
    return sorted(p.name for p in runs.iterdir()) if runs.exists() else []


def test_a_timm_resnet_saved_as_built_loads_strictly_on_the_digits_given_its_own_inputs(tmp_path):
    """timm.create_model('resnet18', num_classes=10): 3 input channels, trained on ImageNet-normalised RGB at 224 px.
    The digits (grey, 8 px) reach it as timm's transform would make them, and the file itself is its weights."""
    torch.manual_seed(0)
    net = timm.create_model("resnet18", pretrained=False, num_classes=10).eval()
    torch.save(net.state_dict(), tmp_path / "r18.pt")
    run, report = import_weights(RunStore(tmp_path / "runs"), "timm:resnet18", tmp_path / "r18.pt")
    assert report.exact
    record = _record(run)
    assert record["inputs"] == ("digits 8 px → 3 × 224 × 224, grayscale repeated, normalised with the model's "
                                "mean/std (timm pretrained_cfg)")
    assert (record["head_classes"], record["data_classes"], record["normalize"]) == (10, 10, "model")
    assert (record["weights"], record["size"]) == (str(tmp_path / "r18.pt"), (tmp_path / "r18.pt").stat().st_size)
    assert list((run.path / layout.CHECKPOINTS).iterdir()) == [], "no copy of the weights"
    cfg, model, data, step = load_trained(run)
    assert (cfg.model.get("in_chans"), cfg.model.num_classes, step) == (3, 10, 0)
    pixels = raw_images(cfg).x_test[:2]
    reference = TF.normalize(TF.resize(pixels.expand(-1, 3, -1, -1), [224, 224],
                                       interpolation=TF.InterpolationMode.BICUBIC, antialias=True).clamp(0, 1),
                             list(IMAGENET[0]), list(IMAGENET[1]))
    with torch.no_grad():
        assert torch.allclose(model(data.x_test[:2]), net(reference), atol=1e-4), "the file's own network"


def test_a_network_trained_on_raw_pixels_is_given_them_when_asked(tmp_path):
    torch.manual_seed(0)
    net = timm.create_model("resnet18", pretrained=False, num_classes=10, in_chans=1).eval()
    torch.save(net.state_dict(), tmp_path / "grey.pt")
    store = RunStore(tmp_path / "runs")
    raw_run, _ = import_weights(store, "timm:resnet18", tmp_path / "grey.pt", {"data.normalize": "none"})
    own_run, _ = import_weights(store, "timm:resnet18", tmp_path / "grey.pt")  # a grey network: the lab's inputs
    assert _record(raw_run)["inputs"] == "digits 8 px → 1 × 8 × 8, raw pixels in [0, 1]"
    assert _record(own_run)["inputs"] == "digits 8 px → 1 × 8 × 8, standardised with the data's own statistics"
    pixels = raw_images(config_of_run(raw_run))
    for run, inputs in ((raw_run, pixels.x_test[:4]), (own_run, pixels.standardize().x_test[:4])):
        _, model, data, _ = load_trained(run)
        with torch.no_grad():
            assert torch.allclose(model(data.x_test[:4]), net(inputs), atol=1e-5)


def test_a_vit_with_its_own_patch_size_is_rebuilt_from_its_embeddings(tmp_path):
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, patch_size=4, img_size=32, in_chans=1,
                            num_classes=10)
    torch.save(vit.state_dict(), tmp_path / "vit.pt")
    store = RunStore(tmp_path / "runs")
    run, report = import_weights(store, "timm:vit_tiny_patch16_224", tmp_path / "vit.pt")
    assert report.exact
    model = config_of_run(run).model
    assert (model.get("patch_size"), model.get("img_size"), model.get("in_chans")) == (4, 32, 1)
    assert _record(run)["inputs"] == "digits 8 px → 1 × 32 × 32, standardised with the data's own statistics"
    with pytest.raises(ValueError, match=r"takes 32 × 32 images .*8 × 8 patches of 4 px.*data.image_size=32"):
        import_weights(store, "timm:vit_tiny_patch16_224", tmp_path / "vit.pt", {"data.image_size": 16})
    assert len(_folders(tmp_path / "runs")) == 1


def test_a_head_for_other_classes_and_the_tensors_left_at_initialisation_are_recorded(tmp_path):
    torch.manual_seed(0)
    net = timm.create_model("resnet10t", pretrained=False)  # ImageNet's 1000 classes
    torch.save(net.state_dict(), tmp_path / "in1k.pt")
    store = RunStore(tmp_path / "runs")
    run, _ = import_weights(store, "timm:resnet10t", tmp_path / "in1k.pt", {"data.image_size": 16})
    record = _record(run)
    assert (record["head_classes"], record["data_classes"], record["initialised"]) == (1000, 10, [])
    assert record["inputs"].startswith("digits 16 px → 3 × 16 × 16, grayscale repeated")  # the size set wins
    headless = {k: v for k, v in net.state_dict().items() if not k.startswith("fc.")}
    torch.save(headless, tmp_path / "backbone.pt")
    with pytest.raises(ValueError, match="2 missing from the file: fc.weight, fc.bias"):
        import_weights(store, "timm:resnet10t", tmp_path / "backbone.pt", {"model.num_classes": 10})
    run, report = import_weights(store, "timm:resnet10t", tmp_path / "backbone.pt", {"model.num_classes": 10},
                                 strict=False)
    assert _record(run)["initialised"] == report.initialised == ["fc.weight", "fc.bias"]
    state = load_checkpoint(run)["model"]
    initial = build_model(config_of_run(run)).state_dict()  # the run's model as initialised (its model.seed)
    assert torch.equal(state["model.fc.weight"], initial["model.fc.weight"])
    assert torch.equal(state["model.conv1.0.weight"], headless["conv1.0.weight"])


def test_the_weights_are_read_from_their_file_and_refused_once_it_changed_or_is_gone(tmp_path):
    net = timm.create_model("resnet18", pretrained=False, num_classes=10, in_chans=1)
    path = tmp_path / "w.pt"
    torch.save(net.state_dict(), path)
    run, _ = import_weights(RunStore(tmp_path / "runs"), "timm:resnet18", path)
    state = load_checkpoint(run)
    assert state["step"] == 0 and torch.equal(state["model"]["model.conv1.weight"], net.conv1.weight)
    with pytest.raises(CheckpointError, match="imported network: its one set of weights is the checkpoint last"):
        load_checkpoint(run, "best")
    with torch.no_grad():
        net.conv1.weight.add_(1.0)
    torch.save(net.state_dict(), path)  # retrained in place: the same size, other bytes
    with pytest.raises(CheckpointError, match=r"w.pt has changed since the network was imported.*import it again"):
        load_checkpoint(run)
    path.unlink()
    with pytest.raises(CheckpointError, match="no weights file .*w.pt any more"):
        load_checkpoint(run)


def test_any_refusal_leaves_no_run_folder(tmp_path):
    runs = tmp_path / "runs"
    net = timm.create_model("resnet18", pretrained=False, num_classes=10, in_chans=1)
    torch.save(net.state_dict(), tmp_path / "w.pt")
    torch.save(net, tmp_path / "whole.pt")  # a pickled model object
    for spec, weights, kwargs, words in (
            ("timm:resnet18", "whole.pt", {}, "pickled objects"),
            ("timm:resnet34", "w.pt", {}, "missing from the file"),
            ("timm:resnet18", "w.pt", {"blocks": "nothing.*"}, "no module of ResNet matches"),
            # stages map one shape to another: the block check fails when the network first runs
            ("timm:resnet18", "w.pt", {"blocks": "layer*"}, "layer1 is no residual block h \\+ F\\(h\\)"),
            ("timm:resnet18", "w.pt", {"settings": ["data.normalize=imagenet"]}, "one of auto, model, data, none"),
            ("timm:resnet18", "w.pt", {"checkpoint": "best"}, "its one set of weights is the checkpoint last")):
        with pytest.raises((ValueError, CheckpointError), match=words):
            lab.analyze(spec, weights=tmp_path / weights, analyses=("rank",), inputs=8, runs_dir=runs, **kwargs)
        assert _folders(runs) == [], spec
    with open(tmp_path / "w.pt", "rb") as f, pytest.raises(ValueError, match="no path the analyses could read"):
        import_weights(RunStore(runs), "timm:resnet18", type("Nameless", (), {"read": f.read})())
    assert _folders(runs) == []


def test_an_image_folder_is_read_at_the_networks_side_and_normalised_as_torchvision_does(tmp_path):
    import torchvision

    from lab.data.formats import make_synthetic_image_folder

    folder = make_synthetic_image_folder(tmp_path / "stripes", classes=3, per_class=4, size=40)
    torch.save(torchvision.models.resnet18(num_classes=3).state_dict(), tmp_path / "tv.pt")
    run, report = import_weights(RunStore(tmp_path / "runs"), "torchvision:resnet18", tmp_path / "tv.pt",
                                 {"data.name": "image_folder", "data.root": str(folder)})
    assert report.exact and config_of_run(run).data.image_size == 224  # read at 224 px, not at 32 and upsampled
    assert _record(run)["inputs"] == ("image_folder 224 px → 3 × 224 × 224, normalised with the model's mean/std "
                                      "(torchvision's ImageNet transforms)")
