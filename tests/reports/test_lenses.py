"""``lab.analyze``: a run or a network with its weights file, under Residual Alignment, re-transformation and the
probe, returning what the analyses wrote."""

import hashlib
import json
import os

import numpy as np
import pytest
import torch

import lab
from lab.cli import main
from lab.nn.named_blocks import MAX_PATTERN_CHARS, match_blocks
from lab.runfolder import layout
from lab.runs.store import RunStore


def test_a_run_is_analysed_by_id_or_folder_and_bad_requests_are_refused_by_name(tmp_path):
    runs = tmp_path / "runs"
    assert main(["train", "configs/ra_fc_digits.yaml", "train.max_steps=2", "model.depth=3", "model.width=16",
                 "--runs-dir", str(runs), "--no-progress"]) == 0
    (folder,) = runs.iterdir()
    fed = []
    result = lab.analyze(folder.name, analyses=("alignment", "retransformation", "rank", "probe"), inputs=8, k=4,
                         nc_inputs=40, runs_dir=runs, probe={"epochs": 2, "limit": 64},
                         progress=lambda done, total: fed.append((done, total)))
    assert result.network is None and result.run.path == folder
    assert result.summary == json.loads((folder / layout.ANALYSIS / layout.ALIGNMENT).read_text())
    assert result.retransformation == json.loads((folder / layout.ANALYSIS / layout.RETRANSFORMATION).read_text())
    assert result.rank == json.loads((folder / layout.ANALYSIS / layout.LAYER_RANK).read_text())
    assert len(result.rank["probe_acc"]) == 4 and result.rank["width"] == [16] * 4
    assert result.probe == json.loads((folder / layout.ANALYSIS / layout.PROBE).read_text())
    with np.load(folder / layout.ANALYSIS / layout.ALIGNMENT_ARRAYS) as arrays:
        assert np.array_equal(result.alignment["scores"], arrays["scores"], equal_nan=True)
    assert fed[-1] == (8 * 3, 8 * 3) and all(a[0] < b[0] for a, b in zip(fed, fed[1:], strict=False))
    assert len(result.retransformation["to_input"]) == 4 and result.retransformation["steps"][0] == "blocks.0"
    again = lab.analyze(RunStore(runs).open(folder.name), analyses=("alignment",), inputs=8, k=4, nc_inputs=40)
    assert again.summary["align_offdiag"] == result.summary["align_offdiag"]
    for kwargs, words in (({"analyses": ("rank_by_magic",)}, "unknown analyses"),
                          ({"weights": tmp_path / "w.pt"}, "not a run")):
        with pytest.raises(ValueError, match=words):
            lab.analyze(RunStore(runs).open(folder.name), **kwargs)
    with pytest.raises(ValueError, match="give its weights file"):
        lab.analyze("timm:resnet18", runs_dir=runs)
    with pytest.raises(ValueError, match="no run"):
        lab.analyze("no-such-run", runs_dir=runs)
    assert [p.name for p in runs.iterdir()] == [folder.name], "a refused request writes no run folder"


def test_weights_given_as_an_open_file_are_read_once_and_recorded_by_the_digest_of_what_was_loaded(tmp_path):
    runs = tmp_path / "runs"
    torch.save({"elsewhere.weight": torch.ones(2)}, tmp_path / "w.pt")
    raw = (tmp_path / "w.pt").read_bytes()
    with open(tmp_path / "w.pt", "rb") as f:
        (tmp_path / "new.pt").write_bytes(b"swapped in after it was opened")
        os.replace(tmp_path / "new.pt", tmp_path / "w.pt")  # another file under the name: never read
        result = lab.analyze("residual_mlp", weights=f, analyses=(), strict=False, runs_dir=runs)
    imported = json.loads((result.run.path / layout.CONFIG).read_text())["imported"]
    assert imported["sha256"] == hashlib.sha256(raw).hexdigest() and imported["weights"] == str(tmp_path / "w.pt")
    assert "1 unexpected in the file: elsewhere.weight" in imported["keys"]


def test_a_huge_blocks_pattern_is_refused_before_it_is_matched(tmp_path):
    with pytest.raises(ValueError, match=f"is 30,000 characters long; the lab takes at most {MAX_PATTERN_CHARS}"):
        lab.analyze("timm:convnext_atto", weights=tmp_path / "w.pt", blocks="[" * 30_000, runs_dir=tmp_path / "runs")
    with pytest.raises(ValueError, match=f"at most {MAX_PATTERN_CHARS}"):
        match_blocks(torch.nn.Sequential(torch.nn.Linear(2, 2)), "[" * 30_000)  # as a config file may name it
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_lab_analyze_runs_on_the_threads_the_command_takes_whatever_an_earlier_training_left(tmp_path, monkeypatch):
    """``lab train`` run in a notebook leaves torch on one thread (a toy model's setting), and the analysis then
    ran on it, where ``python -m lab analyze`` takes every core: it runs on the command's threads, or on those
    asked for, and gives the caller's back."""
    import timm

    from lab.reports.lenses import command_threads

    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # as torch would start with, and the command then runs on
    assert command_threads() == 3
    torch.save(timm.create_model("resnet18", pretrained=False, num_classes=10, in_chans=1).state_dict(),
               tmp_path / "w.pt")
    before = torch.get_num_threads()
    try:
        for threads, expected in ((None, 3), (2, 2)):
            torch.set_num_threads(1)
            seen: set[int] = set()
            lab.analyze("timm:resnet18", weights=tmp_path / "w.pt", analyses=("alignment",), inputs=2, k=1,
                        nc_inputs=20, runs_dir=tmp_path / "runs", threads=threads,
                        progress=lambda done, total, seen=seen: seen.add(torch.get_num_threads()))
            assert seen == {expected} and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
