"""Linear probe: separable data is learned, random labels are not, runs are repeatable."""

import numpy as np
import pytest
import torch

from lab.analysis.probing import linear_probe


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
