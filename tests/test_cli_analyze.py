"""``lab analyze … --model NAME --weights FILE`` says, before its table, what the import did: how the data were made
into the network's inputs, a head for other classes, the tensors that are not the file's; and a refused analysis
leaves no run folder."""

import timm
import torch

from lab.cli import main

RANK = ["--inputs", "8", "--no-progress"]


def test_the_output_says_how_the_inputs_were_adapted_before_the_table(tmp_path, capsys):
    torch.manual_seed(0)
    net = timm.create_model("resnet10t", pretrained=False)  # RGB, ImageNet's 1000 classes
    torch.save(net.state_dict(), tmp_path / "in1k.pt")
    runs = tmp_path / "runs"
    assert main(["analyze", "rank", "--model", "timm:resnet10t", "--weights", str(tmp_path / "in1k.pt"),
                 "--set", "data.image_size=16", *RANK, "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr().out
    inputs = ("inputs: digits 16 px → 3 × 16 × 16, grayscale repeated, normalised with the model's mean/std (timm "
              "pretrained_cfg)")
    head = "head: 1000 classes, the data 10: the network's head is not used for the data's classes"
    assert inputs in out and head in out and out.index(head) < out.index("Rank")
    torch.save({k: v for k, v in net.state_dict().items() if not k.startswith("fc.")}, tmp_path / "backbone.pt")
    assert main(["analyze", "rank", "--model", "timm:resnet10t", "--weights", str(tmp_path / "backbone.pt"),
                 "--set", "data.image_size=16", "--set", "model.num_classes=10", "--strict", "false", *RANK,
                 "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "not from the file (--strict false), left at initialisation: 2 tensors: fc.weight, fc.bias" in out
    assert "head:" not in out


def test_a_refused_analysis_leaves_no_run_folder(tmp_path, capsys):
    torch.save(timm.create_model("resnet18", pretrained=False, num_classes=10, in_chans=1).state_dict(),
               tmp_path / "w.pt")
    runs = tmp_path / "runs"
    for extra, words in ((["--blocks", "layer*"], "is no residual block h + F(h)"),
                         (["--checkpoint", "best"], "its one set of weights is the checkpoint last")):
        assert main(["analyze", "rank", "--model", "timm:resnet18", "--weights", str(tmp_path / "w.pt"), *extra,
                     *RANK, "--runs-dir", str(runs)]) == 2
        assert words in capsys.readouterr().err
        assert not runs.exists() or list(runs.iterdir()) == []
