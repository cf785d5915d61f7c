"""probe_report end to end: runs trained with the real CLI, probed from their folders (digits in memory, an image
folder read file by file)."""

import json

import pytest
import torch

from lab.cli import main
from lab.config import config_of_run
from lab.data.formats import make_synthetic_image_folder
from lab.reports.probe import block_index, pool_tokens, probe_report
from lab.runs.store import Run
from lab.train.build import build_model, loader_data
from lab.train.checkpoint import load_checkpoint
from lab.train.pretrain_eval import features


def train_run(runs, *overrides: str) -> Run:
    assert main(["train", "configs/ra_fc_digits.yaml", "train.engine=loader", "train.epochs=2", "data.workers=0",
                 *overrides, "--runs-dir", str(runs), "--no-progress"]) == 0
    (path,) = list(runs.iterdir())
    return Run(path)


def fresh_model(run: Run, data):
    """The checkpoint's model built independently of the report."""
    model = build_model(config_of_run(run), data)
    model.load_state_dict(load_checkpoint(run, "last")["model"])
    return model.eval()


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory) -> Run:
    return train_run(tmp_path_factory.mktemp("digits"))


def test_probe_of_a_trained_digits_run_is_written_and_cached(digits_run):
    run = digits_run
    first = probe_report(run, epochs=30, device="cpu", progress=False)
    assert first["top1"] >= 0.8 and first["top5"] >= first["top1"] and first["k"] == 5  # chance is 0.1
    assert first["layer"] == "bottleneck" and first["checkpoint"] == "last" and not first["cached"]
    assert first["step"] == load_checkpoint(run, "last")["step"] > 0
    assert (first["n_train"], first["n_test"], first["feature_dim"], first["num_classes"]) == (1438, 359, 128, 10)
    assert (first["epochs"], first["lr"], first["batch_size"]) == (30, 1e-2, 1024) and len(first["loss"]) == 30
    assert json.loads((run.path / "analysis" / "probe.json").read_text()) == first
    cache = run.path / "analysis" / f"features-bottleneck-{first['step']}.pt"
    assert first["features"] == cache.name and cache.is_file()
    records = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
    assert all(r.get("kind") != "probe" for r in records)  # metrics.jsonl belongs to the training process

    # The cache holds tensors only, and they equal a fresh extraction of the unaugmented training and test sets.
    cached = torch.load(cache, weights_only=True)
    data = loader_data(config_of_run(run))
    model = fresh_model(run, data)
    for split, dataset in (("train", data.train_eval), ("test", data.test)):
        feats, labels = features(model, dataset)
        torch.testing.assert_close(cached[split], feats)
        assert torch.equal(cached[f"{split}_labels"], labels)

    second = probe_report(run, epochs=30, device="cpu", progress=False)
    assert second["cached"] and second["extract_s"] < first["extract_s"]
    assert (second["top1"], second["top5"], second["loss"]) == (first["top1"], first["top5"], first["loss"])
    fewer = probe_report(run, epochs=2, limit=100, device="cpu", progress=False)  # a full cache serves a limit
    assert fewer["cached"] and (fewer["n_train"], fewer["n_test"]) == (100, 100)

    cache.write_bytes(b"torn")  # an unreadable cache is extracted again, not an error
    again = probe_report(run, epochs=30, device="cpu", progress=False)
    assert not again["cached"] and again["top1"] == first["top1"]
    assert torch.equal(torch.load(cache, weights_only=True)["test"], cached["test"])


def test_probe_of_a_block_and_its_range(digits_run):
    out = probe_report(digits_run, layer="blocks.0", epochs=20, device="cpu", progress=False)
    assert out["layer"] == "blocks.0" and out["feature_dim"] == 128 and out["top1"] >= 0.5 and not out["cached"]
    assert (digits_run.path / "analysis" / f"features-blocks.0-{out['step']}.pt").is_file()
    with pytest.raises(ValueError, match=r"blocks\.8 is out of range: .* 8 blocks, blocks\.0 to blocks\.7"):
        probe_report(digits_run, layer="blocks.8", epochs=1, progress=False)
    with pytest.raises(ValueError, match="unknown layer 'head'; valid: bottleneck or blocks.N"):
        probe_report(digits_run, layer="head", epochs=1, progress=False)
    with pytest.raises(ValueError, match="epochs >= 1"):
        probe_report(digits_run, epochs=0, progress=False)


def test_layer_names_and_pooling():
    assert block_index("bottleneck") is None and block_index("blocks.12") == 12
    for bad in ("blocks.", "blocks.-1", "block.1", "blocks.1.attn"):
        with pytest.raises(ValueError):
            block_index(bad)
    x = torch.arange(24.0).reshape(2, 3, 4)
    torch.testing.assert_close(pool_tokens(x), x.mean(1))  # tokens [B, N, D]: mean over the N tokens
    conv = torch.randn(2, 5, 3, 3)
    torch.testing.assert_close(pool_tokens(conv), conv.flatten(2).mean(2))  # maps [B, C, H, W]: global average
    assert pool_tokens(x[:, 0]) is not None and torch.equal(pool_tokens(x[:, 0]), x[:, 0])
    with pytest.raises(ValueError, match="cannot pool"):
        pool_tokens(torch.zeros(2))


def test_probe_of_an_image_folder_run_reads_the_files(tmp_path):
    root = make_synthetic_image_folder(tmp_path / "imgs", classes=3, per_class=8, size=16)
    run = train_run(tmp_path / "runs", "model.name=conv_resnet", "model.depths=[2]", "model.channels=[6]",
                    "model.feature_size=8", "data.name=image_folder", f"data.root={root}", "data.image_size=16",
                    "train.batch_size=8")
    out = probe_report(run, layer="blocks.1", epochs=5, batch_size=16, device="cpu", progress=False)
    assert (out["n_train"], out["n_test"], out["feature_dim"], out["num_classes"]) == (24, 24, 6, 3)
    assert 0.0 <= out["top1"] <= out["top5"] == 1.0  # k = 3 classes

    # Block 1's output is a conv map [B, 6, 8, 8], pooled by a global average; the images come from the files.
    data = loader_data(config_of_run(run))
    order = torch.randperm(len(data.test), generator=torch.Generator().manual_seed(0))[:5]  # features' fixed order
    x = torch.stack([data.test[i][0] for i in order.tolist()])
    with torch.no_grad():
        expected = fresh_model(run, data).forward_intermediates(x, intermediates_only=True)[2].mean(dim=(2, 3))
    cached = torch.load(run.path / "analysis" / f"features-blocks.1-{out['step']}.pt", weights_only=True)
    torch.testing.assert_close(cached["test"][:5], expected)
    assert probe_report(run, epochs=5, batch_size=16, device="cpu", progress=False)["feature_dim"] == 6
    with pytest.raises(ValueError, match=r"blocks\.0 to blocks\.1"):
        probe_report(run, layer="blocks.2", progress=False)


def test_an_mae_run_is_probed_with_the_authors_protocol_by_default(tmp_path):
    """The released code's probe reads the mean of every token (class token included) of the last block's raw
    output; ``--protocol mae`` reads the model's forward_features into MAE's BatchNorm head."""
    root = make_synthetic_image_folder(tmp_path / "imgs", classes=2, per_class=8, size=16)
    assert main(["train", "configs/mae_tiny.yaml", f"data.root={root}", "data.image_size=16", "data.workers=0",
                 "data.augment=none", "model.depth=2", "model.embed_dim=16", "model.num_heads=2",
                 "model.decoder_embed_dim=8", "model.decoder_depth=1", "model.decoder_num_heads=1",
                 "train.batch_size=4", "train.epochs=1", "train.warmup_epochs=0",
                 "train.lr_schedule=cosine", "train.probe_every=0", "--runs-dir", str(tmp_path / "runs"),
                 "--no-progress"]) == 0
    (path,) = (tmp_path / "runs").iterdir()
    run = Run(path)
    out = probe_report(run, epochs=3, batch_size=8, device="cpu", progress=False)
    assert out["protocol"] == "authors" and out["features_of"] == "blocks.1 output, mean over tokens"
    assert "released evaluation code" in out["protocol_source"] and out["feature_dim"] == 16
    data = loader_data(config_of_run(run))
    order = torch.randperm(len(data.test), generator=torch.Generator().manual_seed(0))[:4]
    x = torch.stack([data.test[i][0] for i in order.tolist()])
    model = fresh_model(run, data)
    with torch.no_grad():
        last = model.forward_intermediates(x, intermediates_only=True)[-1]  # h_L, [B, 1 + N, D], no final norm
    cached = torch.load(run.path / "analysis" / f"features-blocks.1-{out['step']}.pt", weights_only=True)
    torch.testing.assert_close(cached["test"][:4], last.mean(dim=1))
    mae = probe_report(run, protocol="mae", epochs=3, batch_size=8, device="cpu", progress=False)
    assert mae["protocol"] == "mae" and mae["features_of"] == "forward_features"
    with pytest.raises(ValueError, match="unknown probe protocol"):
        probe_report(run, protocol="lars", progress=False)
