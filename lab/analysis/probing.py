"""Linear probing of frozen features: a measure of representation quality.

The measure *Residual Connections Harm Generative Representation Learning* reports. Two probes:

- :func:`linear_probe`: a multinomial logistic-regression head on standardised features, AdamW, mini-batches; a
  quick probe to follow a run while it trains.
- :func:`bn_linear_probe`: the paper's ImageNet-100 protocol (its appendix A.2; SGD, cosine decay to 0) with the
  parameter-free BatchNorm that MAE's linear probe puts before the head; what ``python -m lab probe`` reports.

Everything random is drawn from seeded generators and the heads start at zero (the problems are convex, so nothing
is lost), which makes a probe bit-for-bit repeatable on CPU for a given seed.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["bn_linear_head", "bn_linear_probe", "linear_probe"]


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


def bn_linear_head(dim: int, num_classes: int) -> nn.Sequential:
    """``BatchNorm1d(dim, affine=False)`` then ``Linear(dim, num_classes)`` (zero weights and bias): MAE's linear
    probing head. The norm has no parameters, so the classifier stays linear in the features; it only puts every
    feature on the same scale. Its running statistics are a cumulative average over all training batches
    (``momentum=None``), so the test-time statistics do not remember their initial 0 and 1 after a short probe.
    """
    head = nn.Sequential(nn.BatchNorm1d(dim, affine=False, momentum=None), nn.Linear(dim, num_classes))
    nn.init.zeros_(head[1].weight)
    nn.init.zeros_(head[1].bias)
    return head


@torch.no_grad()
def _topk(head: nn.Module, X: Tensor, y: Tensor, k: int, batch: int = 8192) -> tuple[float, float]:
    """(top-1, top-k) accuracy of ``head`` (eval mode) on ``X``; batched so no huge logit matrix is built."""
    top1 = topk = 0
    for i in range(0, len(X), batch):
        ranked = head(X[i : i + batch]).topk(k, dim=1).indices  # [b, k], best first
        hit = ranked == y[i : i + batch, None]
        top1 += hit[:, 0].sum().item()
        topk += hit.any(dim=1).sum().item()
    n = max(len(X), 1)
    return top1 / n, topk / n


def bn_linear_probe(
    train_feats: Tensor | np.ndarray,
    train_labels: Tensor | np.ndarray,
    test_feats: Tensor | np.ndarray,
    test_labels: Tensor | np.ndarray,
    *,
    epochs: int = 200,
    lr: float = 1e-2,
    batch_size: int = 1024,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    num_classes: int | None = None,
    seed: int = 0,
    device: str | torch.device | None = None,
) -> dict:
    """Linear probing as *Residual Connections Harm Generative Representation Learning* evaluates on ImageNet-100.

    The protocol of its appendix A.2: a linear classifier on frozen features, batch size 1024, 200 epochs, learning
    rate 1e-2 decayed to 0 by a cosine schedule, no augmentation (the features are fixed). The head is MAE's
    linear-probing head (:func:`bn_linear_head`): a BatchNorm without affine parameters before the linear layer.
    Features of different layers and models come at very different scales (a residual stream grows with depth; a
    decayed shortcut shrinks it), and one learning rate cannot suit them all; normalising every feature makes them
    comparable, and without an affine part the whole head is still a linear map of the features.

    Training: SGD with ``momentum`` on cross-entropy, the learning rate set before every step to
    ``lr · (1 + cos(π t / T)) / 2`` for step t of T; mini-batches from a shuffle drawn by a CPU ``torch.Generator``
    seeded with ``seed`` (a trailing batch of one sample, which a BatchNorm cannot normalise, is skipped). The
    BatchNorm normalises with each batch's statistics while training and with its running statistics (the average
    over training) at test time. Runs in float32 on ``device``, by default the training features' device.

    Args:
        train_feats: training features [n, d].
        train_labels: integer labels [n] in [0, C).
        test_feats: held-out features [m, d].
        test_labels: labels [m].
        epochs: passes over the training set.
        lr: peak (first) learning rate.
        batch_size: mini-batch size.
        momentum: SGD momentum.
        weight_decay: SGD weight decay (L2) on the linear layer.
        num_classes: C; by default 1 + the largest label seen.
        seed: seed of the shuffling.
        device: where to train; default the training features' device.

    Returns:
        ``top1``, ``top5`` (top-k accuracy with k = min(5, C)) on the test features, ``train_top1`` on the training
        features (both in eval mode), ``k``, ``loss`` [epochs] (mean training loss per epoch, numpy), and the
        trained head as CPU tensors: ``weight`` [C, d], ``bias`` [C], ``running_mean`` [d], ``running_var`` [d].
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
    if len(Xtr) < 2 or epochs < 1 or batch_size < 2 or lr <= 0:
        raise ValueError("need at least 2 training samples, epochs >= 1, batch_size >= 2 and lr > 0")
    largest = int(max(ytr.max().item(), yte.max().item() if len(yte) else 0))
    C = num_classes if num_classes is not None else largest + 1
    if largest >= C or min(ytr.min().item(), yte.min().item() if len(yte) else 0) < 0:
        raise ValueError(f"labels must lie in [0, {C})")

    head = bn_linear_head(Xtr.shape[1], C).to(dev)
    opt = torch.optim.SGD(head.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    n = len(Xtr)
    starts = [i for i in range(0, n, batch_size) if min(batch_size, n - i) > 1]
    total_steps, t = epochs * len(starts), 0
    gen = torch.Generator(device="cpu").manual_seed(seed)
    losses = []
    head.train()
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen).to(dev)
        total, seen = torch.zeros((), device=dev), 0  # summed on device: one host sync per epoch, not per step
        for i in starts:
            for group in opt.param_groups:
                group["lr"] = lr * 0.5 * (1.0 + math.cos(math.pi * t / total_steps))
            idx = perm[i : i + batch_size]
            loss = F.cross_entropy(head(Xtr[idx]), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach() * len(idx)
            seen += len(idx)
            t += 1
        losses.append(total.item() / seen)

    head.eval()
    k = min(5, C)
    top1, top5 = _topk(head, Xte, yte, k)
    train_top1, _ = _topk(head, Xtr, ytr, k)
    norm, linear = head
    return {
        "top1": top1,
        "top5": top5,
        "train_top1": train_top1,
        "k": k,
        "loss": np.asarray(losses),
        "weight": linear.weight.detach().cpu(),
        "bias": linear.bias.detach().cpu(),
        "running_mean": norm.running_mean.cpu(),
        "running_var": norm.running_var.cpu(),
    }
