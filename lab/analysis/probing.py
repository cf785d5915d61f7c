"""Linear probing of frozen features: a measure of representation quality.

The measure *Residual Connections Harm Generative Representation Learning* reports. A multinomial
logistic-regression head is trained on standardised features with AdamW and mini-batches. Everything random is drawn
from seeded generators and the head starts at zero (the problem is convex, so nothing is lost), which makes a probe
bit-for-bit repeatable on CPU for a given seed.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["linear_probe"]


def _accuracy(X: Tensor, y: Tensor, W: Tensor, b: Tensor, batch: int) -> float:
    correct = 0
    for i in range(0, len(X), batch):  # batched so a large evaluation set never builds a huge logit matrix
        correct += ((X[i : i + batch] @ W.T + b).argmax(dim=1) == y[i : i + batch]).sum().item()
    return correct / max(len(X), 1)


def linear_probe(
    train_feats: Tensor | np.ndarray,
    train_labels: Tensor | np.ndarray,
    test_feats: Tensor | np.ndarray,
    test_labels: Tensor | np.ndarray,
    *,
    epochs: int = 100,
    lr: float = 1e-2,
    weight_decay: float = 0.0,
    batch_size: int = 256,
    num_classes: int | None = None,
    seed: int = 0,
    device: str | torch.device | None = None,
) -> dict:
    """Train a linear classifier on frozen features and report its accuracies.

    Features are standardised with the mean and std of the *training* set only (std floored at 1e-6 for constant
    features), the head W x + b starts at zero and is trained with AdamW on cross-entropy for ``epochs`` passes over
    shuffled mini-batches (shuffle order from a CPU ``torch.Generator`` seeded with ``seed``). Runs in float32 on
    ``device``, by default the training features' device, so features captured on a GPU are probed there.

    Args:
        train_feats: training features [n, d].
        train_labels: integer labels [n] in [0, C).
        test_feats: held-out features [m, d].
        test_labels: labels [m].
        epochs: passes over the training set.
        lr: AdamW learning rate.
        weight_decay: AdamW (decoupled) weight decay on W and b.
        batch_size: mini-batch size.
        num_classes: C; by default 1 + the largest label seen.
        seed: seed of the shuffling.
        device: where to train; default the training features' device.

    Returns:
        ``train_acc``, ``test_acc`` (floats), ``weight`` [C, d] and ``bias`` [C] expressed for the *raw* features
        (standardisation folded in: logits = x Wᵀ + b), ``mean`` [d] and ``std`` [d] used for standardisation, and
        ``loss`` [epochs] (mean training loss per epoch); tensors on the CPU.
    """
    Xtr, Xte = torch.as_tensor(train_feats), torch.as_tensor(test_feats)
    dev = torch.device(device) if device is not None else Xtr.device
    Xtr, Xte = Xtr.to(dev, torch.float32), Xte.to(dev, torch.float32)
    ytr = torch.as_tensor(train_labels).to(dev, torch.long)
    yte = torch.as_tensor(test_labels).to(dev, torch.long)
    if Xtr.ndim != 2 or Xte.ndim != 2 or Xtr.shape[1] != Xte.shape[1]:
        raise ValueError(f"features must be [n, d] and [m, d], got {tuple(Xtr.shape)} and {tuple(Xte.shape)}")
    if ytr.shape != (len(Xtr),) or yte.shape != (len(Xte),):
        raise ValueError("labels must be one per sample")
    if len(Xtr) == 0 or epochs < 1 or batch_size < 1:
        raise ValueError("need a non-empty training set, epochs >= 1 and batch_size >= 1")
    C = num_classes if num_classes is not None else int(max(ytr.max().item(), yte.max().item() if len(yte) else 0)) + 1

    mean = Xtr.mean(dim=0)
    std = Xtr.std(dim=0, correction=0).clamp_min(1e-6)
    Ztr, Zte = (Xtr - mean) / std, (Xte - mean) / std

    W = torch.zeros(C, Xtr.shape[1], device=dev, requires_grad=True)
    b = torch.zeros(C, device=dev, requires_grad=True)
    opt = torch.optim.AdamW([W, b], lr=lr, weight_decay=weight_decay)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    n, losses = len(Ztr), []
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen).to(dev)
        total = torch.zeros((), device=dev)  # summed on device: one host sync per epoch, not per step
        for i in range(0, n, batch_size):
            idx = perm[i : i + batch_size]
            loss = F.cross_entropy(Ztr[idx] @ W.T + b, ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach() * len(idx)
        losses.append(total.item() / n)

    with torch.no_grad():
        train_acc = _accuracy(Ztr, ytr, W, b, 8192)
        test_acc = _accuracy(Zte, yte, W, b, 8192)
        W_raw = W / std  # x Wᵀ + b on standardised z = (x − μ)/s  ==  x (W/s)ᵀ + (b − (W/s) μ)
        b_raw = b - W_raw @ mean
    return {
        "train_acc": train_acc,
        "test_acc": test_acc,
        "weight": W_raw.detach().cpu(),
        "bias": b_raw.detach().cpu(),
        "mean": mean.cpu(),
        "std": std.cpu(),
        "loss": np.asarray(losses),
    }
