"""Probes of a diffusion run over (noise level, block): the features are the blocks' token means on x_t with the
null label, the report is the whole grid and its best cell, and a run probes itself as it trains."""

import json

import pytest
import torch

from lab.cli import main
from lab.data.keyed import TensorDataset
from lab.nn.registry import create_model
from lab.reports.alignment import load_trained
from lab.runs.store import Run
from lab.train.pretrain_eval import diffusion_features, draw, probe_grid

from .conftest import UNCOND_STEPS


def test_features_are_token_means_of_every_block_on_noised_images_without_labels():
    model = create_model("uvit_tiny", seed=0, embed_dim=16, depth=2, num_heads=2, num_classes=10).eval()
    x, y = torch.randn(6, 1, 8, 8), torch.arange(6)
    feats, labels = diffusion_features(model, TensorDataset(x, y), (0.1, 0.5), batch_size=4, seed=3)
    assert feats.shape == (2, 3, 6, 16) and sorted(labels.tolist()) == list(range(6))
    order = torch.randperm(6, generator=torch.Generator().manual_seed(0))  # the fixed order of features()
    noise = torch.cat([torch.randn(4, 1, 8, 8, generator=(g := torch.Generator().manual_seed(3))),
                       torch.randn(2, 1, 8, 8, generator=g)])
    t = torch.full((6,), 0.5)
    states = model.forward_intermediates(model.process.perturb(x[order], t, noise), t, torch.full((6,), 10),
                                         intermediates_only=True)
    expected = torch.stack([h.mean(dim=1) for h in states[1:]])
    torch.testing.assert_close(feats[1], expected, atol=1e-5, rtol=1e-5)
    plain = create_model("uvit_tiny", seed=0, embed_dim=16, depth=2, num_heads=2, num_classes=10, p_uncond=0.0)
    with pytest.raises(ValueError, match="needs its null class"):
        diffusion_features(plain, TensorDataset(x, y), (0.1,))


def test_the_grid_finds_the_cell_that_holds_the_labels():
    """Features that carry the labels in one (t, block) cell only: that cell is the best."""
    labels = torch.arange(200) % 4
    feats = torch.randn(2, 3, 200, 5, generator=torch.Generator().manual_seed(0))
    feats[1, 2, :, :4] += 4.0 * torch.nn.functional.one_hot(labels, 4)
    grid = probe_grid((feats[:, :, :150], labels[:150]), (feats[:, :, 150:], labels[150:]), 4)
    assert grid.shape == (2, 3) and divmod(int(grid.argmax()), 3) == (1, 2) and grid[1, 2] > 0.95
    assert grid.flatten()[:5].max() < 0.6


def test_lab_probe_reports_the_grid_and_its_best_cell(diffusion_runs, capsys):
    run = diffusion_runs["uncond"]
    assert main(["probe", str(run), "--noise-levels", "0.05,0.3", "--epochs", "20", "--limit", "400",
                 "--device", "cpu"]) == 0
    out, _ = capsys.readouterr()
    summary = json.loads((run / "analysis" / "diffusion_probe.json").read_text())  # its own entry: not the MAE's
    assert not (run / "analysis" / "probe.json").exists()
    assert summary["kind"] == "diffusion" and summary["times"] == [0.05, 0.3] and len(summary["blocks"]) == 3
    grid = torch.tensor(summary["grid"])  # validation accuracy: the cells are chosen on it, never on the test split
    assert grid.shape == (2, 3) and summary["grid_of"].startswith("validation")
    assert summary["n_train"] + summary["n_val"] == 400 and summary["n_val"] == 80 and summary["protocol"] == "quick"
    i, j = divmod(int(grid.argmax()), 3)
    assert summary["block"] == summary["blocks"][j] and summary["t"] == summary["times"][i]
    assert summary["weights"] == "ema"
    assert summary["top1"] > 0.1  # test accuracy of that cell: above chance for 10 digits
    deep = grid[:, 2:]  # a 3-block model: its deepest third is the last block
    assert summary["deep_blocks"] == summary["blocks"][2:] and summary["deep_block"] == summary["blocks"][2]
    assert summary["deep_t"] == summary["times"][int(deep.argmax())]
    assert f"best: {summary['top1']:.4f} on test at {summary['block']}" in out and "deepest blocks:" in out
    assert main(["probe", str(run), "--noise-levels", "0,0.5", "--no-progress"]) == 2
    assert "noise levels must lie in (0, 1]" in capsys.readouterr().err


def test_a_run_probes_and_measures_itself_as_it_trains(diffusion_runs):
    """The evaluation's best probe is the best cell of the grid it writes beside its samples, and its digits-FD is
    that of the moving average's samples from the noise of seed + 1, measured against the training digits."""
    run = Run(diffusion_runs["uncond"])
    records = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
    (last,) = [r for r in records if r["kind"] == "eval"]
    assert 0.1 < last["probe_top1"] <= 1 and last["probe_t"] in (0.02, 0.05, 0.1, 0.2, 0.3)
    assert last["probe_block"] in (0.0, 1.0, 2.0)
    ((step, path),) = run.figures("probe", ".json")
    saved = json.loads(path.read_text())
    grid = torch.tensor(saved["accuracy"])
    assert step == saved["step"] == UNCOND_STEPS and saved["times"] == [0.02, 0.05, 0.1, 0.2, 0.3]
    assert grid.shape == (5, 3) and grid.max().item() == pytest.approx(last["probe_top1"])
    assert grid[int(grid.argmax()) // 3, int(last["probe_block"])] == grid.max()
    cfg, model, data, _ = load_trained(run, loader=True, weights="ema")
    drawn = draw(model, 40, steps=5, sampler=cfg.train.sampler, seed=cfg.train.seed + 1)
    assert last["digits_fd"] == pytest.approx(data.judge(drawn), rel=1e-4) and last["digits_fd"] > 1.0
    assert data.judge(data.test.x[:40]) < last["digits_fd"] / 3  # held-out digits: far closer than an epoch's samples


def test_the_noise_free_probe_points_at_the_diffusion_probe(diffusion_runs):
    from lab.reports.probe import probe_report
    from lab.runs.store import Run

    with pytest.raises(ValueError, match="probes it over \\(noise level, block\\)"):
        probe_report(Run(diffusion_runs["uncond"]))
