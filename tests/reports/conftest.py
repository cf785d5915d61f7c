"""Tiny diffusion runs for the reports that read them (samples, probes), trained once per test process."""

import pytest

from lab.cli import main

TINY_UVIT = ["configs/uvit_tiny_digits.yaml", "model.embed_dim=16", "model.depth=2", "model.num_heads=2",
             "train.batch_size=32", "train.warmup_steps=1", "train.samples=0", "--no-progress"]
UNCOND_STEPS = 50  # one epoch of digits at batch 32: the run ends with a quick probe (train.probe_every=1) of 300
# images per split, and the digits-FD of 40 samples


@pytest.fixture(scope="session")
def diffusion_runs(tmp_path_factory):
    """``uncond``: an unconditional tiny U-ViT, one epoch, probed and measured (digits-FD) as it ends; ``cond``: a
    class-conditional one (label dropout), 3 steps; ``classifier``: a classifier's run."""
    root = tmp_path_factory.mktemp("runs")
    assert main(["train", *TINY_UVIT, f"train.max_steps={UNCOND_STEPS}", "train.probe_every=1",
                 "train.probe_samples=300", "train.fd_samples=40", "train.sample_steps=5", "--name", "uncond",
                 "--runs-dir", str(root)]) == 0
    assert main(["train", *TINY_UVIT, "train.max_steps=3", "model.num_classes=10", "--name", "cond", "--runs-dir",
                 str(root)]) == 0
    assert main(["train", "configs/ra_fc_digits.yaml", "train.max_steps=2", "--name", "classifier", "--runs-dir",
                 str(root), "--no-progress"]) == 0
    return {p.name.split("-", 2)[-1]: p for p in root.iterdir()}
