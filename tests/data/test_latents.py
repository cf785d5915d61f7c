"""Latent folders: an image folder encoded by a local VAE (a tiny randomly initialised ``AutoencoderKL`` saved by the
test), the moments of each image and its mirror kept, training samples drawn from them by key, a latent U-ViT
trained on them whose samples come back as images, and a missing VAE named before anything is written."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from lab.cli import main
from lab.config import config_of_run
from lab.data.formats import make_synthetic_image_folder
from lab.data.latents import (
    LatentDataset,
    VAENotFoundError,
    encode_image_folder,
    image_transform,
    load_vae,
    read_latent_folder,
)
from lab.runs.store import Run


@pytest.fixture(scope="module")
def vae_dir(tmp_path_factory):
    from diffusers import AutoencoderKL

    torch.manual_seed(0)
    vae = AutoencoderKL(block_out_channels=(8, 16), down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, layers_per_block=1, latent_channels=4,
                        norm_num_groups=4, sample_size=16)
    path = tmp_path_factory.mktemp("vae") / "tiny-vae"
    vae.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def latents(vae_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("latents")
    images = make_synthetic_image_folder(base / "images", classes=3, per_class=6, size=16)
    return encode_image_folder(images, vae_dir, base / "latents", image_size=16, batch_size=5, progress=False)


def test_encoding_keeps_the_moments_of_each_image_and_its_mirror(latents, vae_dir):
    index = json.loads((latents / "latents.json").read_text())
    assert index["latent_shape"] == [4, 8, 8] and index["scaling_factor"] == pytest.approx(0.18215)
    assert len(index["train"]) == len(index["test"]) == 18 and len(index["classes"]) == 3
    path, label = index["train"][7]
    with Image.open(path) as im:
        x = image_transform(16)(im.convert("RGB"))[None]
    assert x.min() >= -1 and x.max() <= 1
    vae = load_vae(vae_dir)
    with torch.no_grad():
        expected = torch.cat([vae.encode(x).latent_dist.parameters, vae.encode(x.flip(-1)).latent_dist.parameters])
    stored = torch.from_numpy(np.load(latents / "train" / "7.npy"))
    assert stored.shape == (2, 8, 8, 8)
    torch.testing.assert_close(stored, expected, atol=1e-5, rtol=1e-4)
    # a second encode finds every file and rewrites none
    before = {p: p.stat().st_mtime_ns for p in latents.rglob("*.npy")}
    encode_image_folder(json.loads((latents / "latents.json").read_text())["source"], vae_dir, latents,
                        image_size=16, progress=False)
    assert {p: p.stat().st_mtime_ns for p in latents.rglob("*.npy")} == before


def test_training_samples_are_draws_from_the_moments_of_the_image_or_its_mirror(latents):
    s = 0.18215
    index = read_latent_folder(latents)
    train = LatentDataset(latents, index, "train", sample=True, seed=3)
    held_out = LatentDataset(latents, index, "test", sample=False)
    moments = torch.from_numpy(np.load(latents / "train" / "2.npy"))
    (mu0, logvar0), (mu1, logvar1) = (m.chunk(2) for m in moments)
    z, label = train[(0, 2)]
    assert torch.equal(z, train[(0, 2)][0]) and not torch.equal(z, train[(1, 2)][0])  # a function of the key
    draws = torch.stack([train[(epoch, 2)][0] for epoch in range(400)]) / s
    # half of the draws from each orientation: mean (μ₀ + μ₁)/2, variance (σ₀² + σ₁²)/2 + ((μ₀ − μ₁)/2)²
    torch.testing.assert_close(draws.mean(0), (mu0 + mu1) / 2, atol=0.25, rtol=0)
    var = (logvar0.exp() + logvar1.exp()) / 2 + ((mu0 - mu1) / 2) ** 2
    assert (draws.var(0) / var).mean().item() == pytest.approx(1.0, abs=0.1)
    test_moments = torch.from_numpy(np.load(latents / "test" / "5.npy"))
    torch.testing.assert_close(held_out[5][0], s * test_moments[0].chunk(2)[0])  # held out: s μ, unmirrored
    assert label == json.loads((latents / "latents.json").read_text())["train"][2][1]


def test_a_missing_vae_is_named_and_nothing_is_written(tmp_path, latents, capsys):
    with pytest.raises(VAENotFoundError, match="no VAE at"):
        load_vae(tmp_path / "nowhere")
    images = make_synthetic_image_folder(tmp_path / "images", classes=2, per_class=2, size=16)
    assert main(["latents", str(images), "--vae", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")]) == 2
    assert "no VAE at" in capsys.readouterr().err and not (tmp_path / "out").exists()
    # a latent folder whose VAE has gone: refused before a run folder exists (its samples could not be decoded)
    moved = tmp_path / "moved"
    index = json.loads((latents / "latents.json").read_text())
    moved.mkdir()
    (moved / "latents.json").write_text(json.dumps({**index, "vae": str(tmp_path / "gone")}))
    assert main(["train", "configs/uvit_mid_in100_latent.yaml", f"data.root={moved}", "--runs-dir",
                 str(tmp_path / "runs"), "--no-progress"]) == 2
    assert "which is not there" in capsys.readouterr().err and not (tmp_path / "runs").exists()


def test_a_latent_u_vit_trains_and_its_samples_are_decoded_into_images(latents, tmp_path):
    args = ["configs/uvit_mid_in100_latent.yaml", f"data.root={latents}", "data.workers=0", "model.embed_dim=16",
            "model.depth=2", "model.num_heads=2", "train.batch_size=6", "train.max_steps=3", "train.eval_every=3",
            "train.warmup_steps=1", "train.samples=4", "train.sample_steps=3", "train.log_every=1",
            "--runs-dir", str(tmp_path), "--no-progress"]
    assert main(["train", *args]) == 0
    (run,) = tmp_path.iterdir()
    config = config_of_run(Run(run))
    assert config.model.name == "uvit_mid" and config.data.name == "latent_folder"
    with Image.open(run / "figures" / "samples-000000003.png") as grid:
        assert grid.mode == "RGB" and min(grid.size) >= 32  # 2 × 2 decoded 16 × 16 images, not 8 × 8 latents
    assert main(["sample", str(run), "--num", "2", "--steps", "3", "--no-progress"]) == 0
    (npz,) = (run / "analysis").glob("*.npz")
    assert np.load(npz)["samples"].shape == (2, 3, 16, 16)  # decoded images, not 4 × 8 × 8 latents


def test_under_torchrun_each_process_encodes_its_share_and_rank_0_writes_the_index(vae_dir, tmp_path, monkeypatch):
    images = make_synthetic_image_folder(tmp_path / "images", classes=2, per_class=3, size=16)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    out = encode_image_folder(images, vae_dir, tmp_path / "latents", image_size=16, progress=False)
    assert sorted(p.name for p in (out / "train").glob("*.npy")) == ["1.npy", "3.npy", "5.npy"]
    assert not (out / "latents.json").exists()  # rank 0 writes it once every share is there
    monkeypatch.setenv("RANK", "0")
    encode_image_folder(images, vae_dir, out, image_size=16, progress=False, wait_s=5)
    index = json.loads((out / "latents.json").read_text())
    assert len(index["train"]) == 6 and len(list((out / "train").glob("*.npy"))) == 6
