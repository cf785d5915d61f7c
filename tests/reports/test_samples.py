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
    ("uncond", ["--num", "0"], "num, steps and batch_size must be at least 1"),
    # unbounded requests: refused with what they would cost, before anything is drawn or written
    ("uncond", ["--num", "1000000000"], "--num 1,000,000,000 is more than the 100,000 samples one command draws: "
                                        "1,000,000,000 samples of 1 × 8 × 8 values would take 256.0 GB on disk"),
    ("cond", ["--num", "1000000000"], "would take 256.0 GB on disk"),
    ("uncond", ["--steps", "100000"], "--steps 100,000 is more than the 10,000 sampler steps allowed"),
    ("cond", ["--guidance", "nan"], "--guidance must be a finite scale from 0 to 100; got nan"),
    ("cond", ["--guidance", "inf"], "--guidance must be a finite scale from 0 to 100; got inf"),
    ("cond", ["--guidance", "-1"], "--guidance must be a finite scale"),
    ("classifier", [], "only diffusion runs sample images"),
    ("classifier", ["--ema"], "only diffusion runs sample images"),
])
def test_what_cannot_be_sampled_is_refused_with_a_reason(diffusion_runs, capsys, which, args, message):
    before = sorted(p.name for p in diffusion_runs[which].rglob("*"))
    assert main(["sample", str(diffusion_runs[which]), "--no-progress", *args]) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in diffusion_runs[which].rglob("*")) == before


def test_samples_are_written_batch_by_batch_into_the_same_npz(diffusion_runs, monkeypatch):
    """A large request never holds its samples at once: each batch goes to disk as it is drawn, and the file reads as
    numpy.savez_compressed would have written it."""
    from lab.reports import samples
    from lab.runs.store import Run

    run = Run(diffusion_runs["uncond"])
    held = []
    real = samples.sample_batches

    def watched(*args, **kwargs):
        sampling = real(*args, **kwargs)

        def batches():
            for batch in sampling.batches:
                held.append(len(batch))
                yield batch
        return sampling._replace(batches=batches())

    monkeypatch.setattr(samples, "sample_batches", watched)
    summary = samples.sample_report(run, num=300, steps=2, batch_size=64, progress=False)
    assert held == [64, 64, 64, 64, 44]
    got = np.load(summary["npz"])
    assert got["samples"].shape == (300, 1, 8, 8) and got["samples"].dtype == np.float32
    assert np.isfinite(got["samples"]).all() and (got["labels"] == -1).all()
    drawn = samples.draw_samples(run, num=300, steps=2, batch_size=300, progress=False)  # same noise, one batch
    assert np.allclose(got["samples"][:64], drawn.images.numpy()[:64], atol=1e-5)
    assert Image.open(summary["png"]).size[0] <= 16 * 9 + 1, "the grid shows the first 256 samples at most"
