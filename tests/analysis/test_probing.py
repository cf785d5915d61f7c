"""Linear probes: separable data is learned, random labels are not, runs are repeatable."""

from functools import partial

import numpy as np
import pytest
import torch

from lab.analysis.probing import PROTOCOLS, bn_linear_head, linear_probe, protocol_probe

bn_linear_probe = partial(protocol_probe, protocol="mae")  # MAE's BatchNorm head, SGD


def gaussian_blobs(n_per: int, C: int = 3, d: int = 10, seed: int = 0, sep: float = 4.0):
    g = torch.Generator().manual_seed(seed)
    centres = sep * torch.randn(C, d, generator=torch.Generator().manual_seed(123))
    y = torch.arange(C).repeat_interleave(n_per)
    X = centres[y] + torch.randn(len(y), d, generator=g)
    # Different scales and offsets per feature: standardisation must cope.
    X = X * torch.logspace(-2, 2, d) + 50.0
    return X, y


def test_separable_blobs_reach_high_accuracy():
    Xtr, ytr = gaussian_blobs(150, seed=0)
    Xte, yte = gaussian_blobs(150, seed=1)
    out = linear_probe(Xtr, ytr, Xte, yte, epochs=30)
    assert out["train_acc"] >= 0.95 and out["test_acc"] >= 0.95
    assert out["weight"].shape == (3, 10) and out["bias"].shape == (3,)
    assert out["loss"].shape == (30,) and out["loss"][-1] < out["loss"][0]
    # Folded weights classify raw features exactly as the probe reports.
    acc = ((Xte @ out["weight"].T + out["bias"]).argmax(1) == yte).float().mean().item()
    assert acc == pytest.approx(out["test_acc"], abs=1.5 / len(yte))
    # Standardisation statistics come from the training set only.
    torch.testing.assert_close(out["mean"], Xtr.mean(0))


def test_random_labels_give_chance_on_held_out_data():
    g = torch.Generator().manual_seed(5)
    Xtr, Xte = torch.randn(400, 20, generator=g), torch.randn(2000, 20, generator=g)
    ytr, yte = torch.randint(0, 2, (400,), generator=g), torch.randint(0, 2, (2000,), generator=g)
    out = linear_probe(Xtr, ytr, Xte, yte, epochs=50)
    assert abs(out["test_acc"] - 0.5) < 0.05
    assert out["train_acc"] > out["test_acc"]  # it can only memorise


def test_deterministic_and_seed_dependent():
    Xtr, ytr = gaussian_blobs(60, seed=2, sep=1.0)
    Xte, yte = gaussian_blobs(60, seed=3, sep=1.0)
    kwargs = dict(epochs=5, batch_size=32, lr=0.05)
    a = linear_probe(Xtr, ytr, Xte, yte, seed=7, **kwargs)
    b = linear_probe(Xtr.numpy(), ytr.numpy(), Xte.numpy(), yte.numpy(), seed=7, **kwargs)
    assert torch.equal(a["weight"], b["weight"]) and a["test_acc"] == b["test_acc"]
    np.testing.assert_array_equal(a["loss"], b["loss"])
    c = linear_probe(Xtr, ytr, Xte, yte, seed=8, **kwargs)
    assert not torch.equal(a["weight"], c["weight"])


def test_num_classes_and_validation():
    Xtr, ytr = gaussian_blobs(20, C=2, seed=0)
    out = linear_probe(Xtr, ytr, Xtr, ytr, epochs=2, num_classes=5)
    assert out["weight"].shape == (5, 10)
    with pytest.raises(ValueError):
        linear_probe(Xtr, ytr, Xtr[:, :3], ytr, epochs=1)
    with pytest.raises(ValueError):
        linear_probe(Xtr, ytr[:-1], Xtr, ytr, epochs=1)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_runs_on_the_features_device():
    Xtr, ytr = gaussian_blobs(100, seed=0)
    out = linear_probe(Xtr.cuda(), ytr.cuda(), Xtr.cuda(), ytr.cuda(), epochs=10)
    assert out["train_acc"] >= 0.95 and out["weight"].device.type == "cpu"


# -- protocol_probe, mae: the paper's ImageNet-100 settings with MAE's BatchNorm head --------------------------------

def scaled_blobs(n_per: int, seed: int):
    """4 separable classes whose 10 features span six orders of magnitude in scale, with large offsets."""
    X, y = gaussian_blobs(n_per, C=4, seed=seed)
    return X * torch.logspace(-3, 3, 10), y


def test_bn_probe_learns_separable_features_of_any_scale():
    Xtr, ytr = scaled_blobs(150, seed=0)
    Xte, yte = scaled_blobs(150, seed=1)
    out = bn_linear_probe(Xtr, ytr, Xte, yte, epochs=30, batch_size=128)
    assert out["top1"] >= 0.95 and out["train_top1"] >= 0.95
    assert out["k"] == 4 and out["top5"] == 1.0
    assert out["loss"].shape == (30,) and out["loss"][-1] < 0.5 * out["loss"][0]
    # Test time uses the running statistics: the mean of the batch statistics, close to the training set's.
    assert ((out["running_mean"] - Xtr.mean(0)).abs() / Xtr.std(0)).max() < 0.02
    torch.testing.assert_close(out["running_var"], Xtr.var(0), rtol=0.05, atol=0)
    # The reported accuracy is that of normalise-with-running-statistics, then the linear layer.
    with torch.no_grad():
        logits = ((Xte - out["running_mean"]) / (out["running_var"] + 1e-5).sqrt()) @ out["weight"].T + out["bias"]
    assert (logits.argmax(1) == yte).float().mean().item() == pytest.approx(out["top1"], abs=1.5 / len(yte))


def test_bn_probe_top5_counts_the_five_best_classes():
    g = torch.Generator().manual_seed(11)
    Xtr, Xte = torch.randn(400, 64, generator=g), torch.randn(3000, 64, generator=g)
    ytr, yte = torch.randint(0, 10, (400,), generator=g), torch.randint(0, 10, (3000,), generator=g)
    out = bn_linear_probe(Xtr, ytr, Xte, yte, epochs=40, batch_size=64, lr=0.05)
    assert out["k"] == 5
    assert abs(out["top1"] - 0.1) < 0.035 and abs(out["top5"] - 0.5) < 0.05  # chance on held-out data
    assert out["train_top1"] > out["top1"] + 0.1  # it can only memorise


def test_bn_probe_is_reproducible_under_a_seed():
    Xtr, ytr = gaussian_blobs(60, seed=2, sep=1.0)
    Xte, yte = gaussian_blobs(60, seed=3, sep=1.0)
    kwargs = dict(epochs=5, batch_size=32, lr=0.05)
    a = bn_linear_probe(Xtr, ytr, Xte, yte, seed=7, **kwargs)
    b = bn_linear_probe(Xtr.numpy(), ytr.numpy(), Xte.numpy(), yte.numpy(), seed=7, **kwargs)
    assert torch.equal(a["weight"], b["weight"]) and a["top1"] == b["top1"]
    np.testing.assert_array_equal(a["loss"], b["loss"])
    c = bn_linear_probe(Xtr, ytr, Xte, yte, seed=8, **kwargs)
    assert not torch.equal(a["weight"], c["weight"])


def test_bn_head_norm_has_no_parameters():
    head = bn_linear_head(32, 7)
    norm, linear = head
    assert isinstance(norm, torch.nn.BatchNorm1d) and not norm.affine
    assert list(norm.parameters()) == []
    assert [p.shape for p in head.parameters()] == [(7, 32), (7,)]
    assert not linear.weight.any() and not linear.bias.any()


def test_bn_probe_learning_rate_follows_a_cosine_to_zero(monkeypatch):
    seen = []
    step = torch.optim.SGD.step

    def spy(self, *args, **kwargs):
        seen.append(self.param_groups[0]["lr"])
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.SGD, "step", spy)
    Xtr, ytr = gaussian_blobs(50, seed=0)  # 150 samples, batches of 64: 3 steps per epoch (last one 22 samples)
    bn_linear_probe(Xtr, ytr, Xtr, ytr, epochs=4, batch_size=64, lr=0.2)
    T = 12
    np.testing.assert_allclose(seen, [0.1 * (1 + np.cos(np.pi * t / T)) for t in range(T)])


def test_bn_probe_validation():
    Xtr, ytr = gaussian_blobs(20, C=2, seed=0)
    out = bn_linear_probe(Xtr, ytr, Xtr, ytr, epochs=1, batch_size=39)  # a trailing batch of one is skipped
    assert out["weight"].shape == (2, 10)
    assert bn_linear_probe(Xtr, ytr, Xtr, ytr, epochs=1, num_classes=6)["weight"].shape == (6, 10)
    with pytest.raises(ValueError, match="features must be"):
        bn_linear_probe(Xtr, ytr, Xtr[:, :3], ytr, epochs=1)
    with pytest.raises(ValueError, match="labels must lie"):
        bn_linear_probe(Xtr, ytr, Xtr, ytr, epochs=1, num_classes=1)
    with pytest.raises(ValueError, match="epochs"):
        bn_linear_probe(Xtr, ytr, Xtr, ytr, epochs=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_bn_probe_runs_on_the_features_device():
    Xtr, ytr = scaled_blobs(100, seed=0)
    out = bn_linear_probe(Xtr.cuda(), ytr.cuda(), Xtr.cuda(), ytr.cuda(), epochs=10, batch_size=64)
    assert out["top1"] >= 0.95 and out["weight"].device.type == "cpu" and out["running_var"].device.type == "cpu"
    cpu = bn_linear_probe(Xtr, ytr, Xtr, ytr, epochs=10, batch_size=64)
    torch.testing.assert_close(out["weight"], cpu["weight"], rtol=1e-2, atol=1e-3)


# -- protocol_probe, authors: the released code's probe ---------------------------------------------------------------

def test_the_authors_protocol_is_a_plain_linear_layer_trained_with_adamw(monkeypatch):
    spec = PROTOCOLS["authors"]
    assert (spec.features, spec.batchnorm, spec.optimizer, spec.weight_decay, spec.cosine_per) == (
        "last_block_mean", False, "adamw", 0.01, "epoch")  # torch's AdamW default weight decay
    seen = []
    step = torch.optim.AdamW.step

    def spy(self, *args, **kwargs):
        seen.append((self.param_groups[0]["lr"], self.param_groups[0]["weight_decay"]))
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    Xtr, ytr = gaussian_blobs(50, seed=0)  # 150 samples, batches of 64: 3 steps per epoch, the last of 22
    out = protocol_probe(Xtr, ytr, Xtr, ytr, epochs=4, batch_size=64, lr=0.2)
    E = 4  # the rate is set once per epoch: cos over epochs, constant within one
    np.testing.assert_allclose([lr for lr, _ in seen], [0.1 * (1 + np.cos(np.pi * e / E)) for e in range(E)
                                                        for _ in range(3)])
    assert {wd for _, wd in seen} == {0.01}
    assert out["protocol"] == "authors" and "running_mean" not in out
    # no BatchNorm: the reported accuracy is that of the linear layer on the raw features
    with torch.no_grad():
        logits = Xtr @ out["weight"].T + out["bias"]
    assert (logits.argmax(1) == ytr).sum().item() == round(out["top1"] * len(ytr))


def test_the_authors_protocol_learns_separable_features():
    Xtr, ytr = gaussian_blobs(150, seed=0)
    Xte, yte = gaussian_blobs(150, seed=1)
    out = protocol_probe(Xtr, ytr, Xte, yte, epochs=30, batch_size=128)
    assert out["top1"] >= 0.95 and out["loss"][-1] < 0.5 * out["loss"][0]
    assert not isinstance(bn_linear_head(10, 3, batchnorm=False)[0], torch.nn.BatchNorm1d)
