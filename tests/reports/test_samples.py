"""``python -m lab sample``: a grid and the samples of a diffusion run, the same for the same seed; clear refusals
for what cannot be sampled."""

import numpy as np
import pytest
from PIL import Image

from lab.cli import main
from tests.reports.conftest import UNCOND_STEPS


def test_samples_are_a_grid_and_an_npz_the_same_for_the_same_seed(diffusion_runs, capsys):
    run, step = diffusion_runs["uncond"], UNCOND_STEPS
    assert main(["sample", str(run), "--num", "5", "--steps", "3", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    png, npz = (run / "analysis" / f"samples-{step}-ode3-ema-seed0.{ext}" for ext in ("png", "npz"))
    assert f"5 samples of step {step} (ode sampler, 3 steps, ema weights, seed 0)" in out and f"wrote {png}" in err
    first = np.load(npz)
    assert first["samples"].shape == (5, 1, 8, 8) and (first["labels"] == -1).all()
    assert Image.open(png).size == (3 * 8 + 4, 2 * 8 + 3)  # 3 columns × 2 rows of 8 × 8 with 1-pixel padding
    assert main(["sample", str(run), "--num", "5", "--steps", "3", "--no-progress"]) == 0
    assert np.array_equal(np.load(npz)["samples"], first["samples"])
    assert main(["sample", str(run), "--num", "5", "--steps", "3", "--no-ema", "--sampler", "sde", "--seed", "1",
                 "--no-progress"]) == 0
    other = np.load(run / "analysis" / f"samples-{step}-sde3-model-seed1.npz")["samples"]
    assert not np.array_equal(other, first["samples"])


def test_a_conditional_run_samples_its_classes_with_guidance(diffusion_runs):
    run = diffusion_runs["cond"]
    assert main(["sample", str(run), "--num", "12", "--steps", "2", "--guidance", "0.4", "--no-progress"]) == 0
    got = np.load(run / "analysis" / "samples-3-ode2-w0.4-ema-seed0.npz")
    assert got["labels"].tolist() == [*range(10), 0, 1] and np.isfinite(got["samples"]).all()


@pytest.mark.parametrize(("which", "args", "message"), [
    ("uncond", ["--guidance", "1"], "needs a class-conditional run"),
    ("uncond", ["--num", "0"], "need num, steps and batch_size >= 1"),
    ("classifier", [], "only diffusion runs sample images"),
    ("classifier", ["--ema"], "only diffusion runs sample images"),
])
def test_what_cannot_be_sampled_is_refused_with_a_reason(diffusion_runs, capsys, which, args, message):
    before = sorted(p.name for p in diffusion_runs[which].rglob("*"))
    assert main(["sample", str(diffusion_runs[which]), "--no-progress", *args]) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in diffusion_runs[which].rglob("*")) == before
