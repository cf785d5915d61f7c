"""``python -m lab sample``: a grid and the samples of a diffusion run, the same for the same seed; clear refusals
for what cannot be sampled."""

import numpy as np
import pytest
from PIL import Image

from lab.cli import main

TINY = ["model.embed_dim=16", "model.depth=2", "model.num_heads=2", "train.batch_size=32", "train.max_steps=3",
        "train.warmup_steps=1", "train.samples=0", "--no-progress"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """An unconditional and a class-conditional tiny diffusion run, and a classifier's run."""
    root = tmp_path_factory.mktemp("runs")
    assert main(["train", "configs/uvit_tiny_digits.yaml", *TINY, "--name", "uncond", "--runs-dir", str(root)]) == 0
    assert main(["train", "configs/uvit_tiny_digits.yaml", *TINY, "model.num_classes=10", "--name", "cond",
                 "--runs-dir", str(root)]) == 0
    assert main(["train", "configs/ra_fc_digits.yaml", "train.max_steps=2", "--name", "classifier", "--runs-dir",
                 str(root), "--no-progress"]) == 0
    return {p.name.split("-", 2)[-1]: p for p in root.iterdir()}


def test_samples_are_a_grid_and_an_npz_the_same_for_the_same_seed(runs, capsys):
    run = runs["uncond"]
    assert main(["sample", str(run), "--num", "5", "--steps", "3", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    png, npz = run / "analysis" / "samples-3-ode3-ema-seed0.png", run / "analysis" / "samples-3-ode3-ema-seed0.npz"
    assert "5 samples of step 3 (ode sampler, 3 steps, ema weights, seed 0)" in out and f"wrote {png}" in err
    first = np.load(npz)
    assert first["samples"].shape == (5, 1, 8, 8) and (first["labels"] == -1).all()
    width, height = Image.open(png).size
    assert (width, height) == (3 * 8 + 4, 2 * 8 + 3)  # 3 columns × 2 rows of 8 × 8 with 1-pixel padding
    assert main(["sample", str(run), "--num", "5", "--steps", "3", "--no-progress"]) == 0
    assert np.array_equal(np.load(npz)["samples"], first["samples"])
    assert main(["sample", str(run), "--num", "5", "--steps", "3", "--no-ema", "--sampler", "sde", "--seed", "1",
                 "--no-progress"]) == 0
    other = np.load(run / "analysis" / "samples-3-sde3-model-seed1.npz")["samples"]
    assert not np.array_equal(other, first["samples"])


def test_a_conditional_run_samples_its_classes_with_guidance(runs, capsys):
    run = runs["cond"]
    assert main(["sample", str(run), "--num", "12", "--steps", "2", "--guidance", "0.4", "--no-progress"]) == 0
    got = np.load(run / "analysis" / "samples-3-ode2-w0.4-ema-seed0.npz")
    assert got["labels"].tolist() == [*range(10), 0, 1] and np.isfinite(got["samples"]).all()


@pytest.mark.parametrize(("which", "args", "message"), [
    ("uncond", ["--guidance", "1"], "needs a class-conditional run"),
    ("uncond", ["--num", "0"], "need num, steps and batch_size >= 1"),
    ("classifier", [], "only diffusion runs sample images"),
    ("classifier", ["--ema"], "only diffusion runs sample images"),
])
def test_what_cannot_be_sampled_is_refused_with_a_reason(runs, capsys, which, args, message):
    before = sorted(p.name for p in runs[which].rglob("*"))
    assert main(["sample", str(runs[which]), "--no-progress", *args]) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in runs[which].rglob("*")) == before


def test_the_noise_free_probe_refuses_a_diffusion_run(runs, capsys):
    assert main(["probe", str(runs["uncond"]), "--no-progress"]) == 2
    assert "is a diffusion run: its features depend on a noise level" in capsys.readouterr().err
