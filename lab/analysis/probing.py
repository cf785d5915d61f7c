"""Linear probing of frozen features: a measure of representation quality.

The measure *Residual Connections Harm Generative Representation Learning* reports. Two probes:

- :func:`linear_probe`: a multinomial logistic-regression head on standardised features, AdamW, mini-batches; a
  quick probe to follow a run while it trains.
- :func:`protocol_probe`: the paper's ImageNet-100 protocol (its appendix A.2: batch 1024, 200 epochs, cosine decay
  to 0) as the authors' released code runs it (``authors``: a linear layer, AdamW) or with MAE's parameter-free
  BatchNorm head and SGD (``mae``); what ``python -m lab probe`` reports (:data:`PROTOCOLS`).

Everything random is drawn from seeded generators and the heads start at zero (the problems are convex, so nothing
is lost), which makes a probe bit-for-bit repeatable on CPU for a given seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["PROTOCOLS", "ProbeProtocol", "bn_linear_head", "linear_probe", "protocol_probe"]

Arrayish = Tensor | np.ndarray


def _split_tensors(train_feats: Arrayish, train_labels: Arrayish, test_feats: Arrayish, test_labels: Arrayish,
                   device: str | torch.device | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Features as float32 [n, d] / [m, d] and labels as int64 [n] / [m], on ``device`` (default: the training
    features'), checked to agree in shape."""
    Xtr, Xte = torch.as_tensor(train_feats), torch.as_tensor(test_feats)
    dev = torch.device(device) if device is not None else Xtr.device
    Xtr, Xte = Xtr.to(dev, torch.float32), Xte.to(dev, torch.float32)
    ytr = torch.as_tensor(train_labels).to(dev, torch.long)
    yte = torch.as_tensor(test_labels).to(dev, torch.long)
    if Xtr.ndim != 2 or Xte.ndim != 2 or Xtr.shape[1] != Xte.shape[1]:
        raise ValueError(f"features must be [n, d] and [m, d], got {tuple(Xtr.shape)} and {tuple(Xte.shape)}")
    if ytr.shape != (len(Xtr),) or yte.shape != (len(Xte),):
        raise ValueError("labels must be one per sample")
    return Xtr, ytr, Xte, yte


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
    Xtr, ytr, Xte, yte = _split_tensors(train_feats, train_labels, test_feats, test_labels, device)
    dev = Xtr.device
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


def bn_linear_head(dim: int, num_classes: int, batchnorm: bool = True) -> nn.Sequential:
    """``BatchNorm1d(dim, affine=False)`` then ``Linear(dim, num_classes)`` (zero weights and bias): MAE's linear
    probing head (``batchnorm=False``: the linear layer alone, the authors' released probe). The norm has no
    parameters, so the classifier stays linear in the features; it only puts every feature on the same scale. Its
    running statistics are a cumulative average over all training batches (``momentum=None``), so the test-time
    statistics do not remember their initial 0 and 1 after a short probe.
    """
    norm = nn.BatchNorm1d(dim, affine=False, momentum=None) if batchnorm else nn.Identity()
    head = nn.Sequential(norm, nn.Linear(dim, num_classes))
    nn.init.zeros_(head[1].weight)
    nn.init.zeros_(head[1].bias)
    return head


@dataclass(frozen=True)
class ProbeProtocol:
    """How a linear probe is trained on frozen features, and whose protocol it is.

    Attributes:
        name: ``authors`` or ``mae``.
        source: where the protocol comes from, as reports cite it.
        features: ``last_block_mean`` (the mean over all tokens, class token included, of the last block's raw
            output) or ``model`` (the model's ``forward_features``).
        batchnorm: a BatchNorm without affine parameters before the linear layer.
        optimizer: ``adamw`` or ``sgd`` (momentum 0.9).
        weight_decay: of the optimiser.
        cosine_per: the cosine schedule's unit: ``epoch`` (the rate is set once per epoch) or ``step``.
    """

    name: str
    source: str
    features: str
    batchnorm: bool
    optimizer: str
    weight_decay: float
    cosine_per: str


PROTOCOLS = {
    "authors": ProbeProtocol(
        "authors", "the released evaluation code of Residual Connections Harm Generative Representation Learning: "
        "mean of all tokens of the last encoder block (no final norm), a linear layer, AdamW (weight decay 0.01, "
        "torch's default), cosine per epoch", "last_block_mean", batchnorm=False, optimizer="adamw",
        weight_decay=0.01, cosine_per="epoch"),
    "mae": ProbeProtocol(
        "mae", "MAE's linear-probing head (BatchNorm without affine parameters, then a linear layer) trained with "
        "SGD (momentum 0.9), cosine per step, on the model's features", "model", batchnorm=True, optimizer="sgd",
        weight_decay=0.0, cosine_per="step"),
}


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


def protocol_probe(
    train_feats: Tensor | np.ndarray,
    train_labels: Tensor | np.ndarray,
    test_feats: Tensor | np.ndarray,
    test_labels: Tensor | np.ndarray,
    *,
    protocol: str | ProbeProtocol = "authors",
    epochs: int = 200,
    lr: float = 1e-2,
    batch_size: int = 1024,
    num_classes: int | None = None,
    seed: int = 0,
    device: str | torch.device | None = None,
) -> dict:
    """Linear probing as *Residual Connections Harm Generative Representation Learning* evaluates on ImageNet-100.

    Both protocols share the settings of its appendix A.2: a linear classifier on frozen features, batch size 1024,
    200 epochs, learning rate 1e-2 decayed to 0 by a cosine schedule, no augmentation (the features are fixed).
    They differ where :data:`PROTOCOLS` says: ``authors`` is the released code (a plain linear layer, AdamW, the rate
    ``lr · (1 + cos(π e / E)) / 2`` set at the start of epoch e of E); ``mae`` puts MAE's parameter-free BatchNorm
    before the layer and trains with SGD, the rate set before every step t of T to ``lr · (1 + cos(π t / T)) / 2``.
    A BatchNorm makes features of different layers and models comparable in scale (a residual stream grows with
    depth; a decayed shortcut shrinks it); without an affine part the head is still a linear map of the features.

    Mini-batches come from a shuffle drawn by a CPU ``torch.Generator`` seeded with ``seed`` (with a BatchNorm, a
    trailing batch of one sample, which it cannot normalise, is skipped). Runs in float32 on ``device``, by default
    the training features' device.

    Args:
        train_feats: training features [n, d].
        train_labels: integer labels [n] in [0, C).
        test_feats: held-out features [m, d].
        test_labels: labels [m].
        protocol: ``authors``, ``mae`` or a :class:`ProbeProtocol`.
        epochs: passes over the training set.
        lr: peak (first) learning rate.
        batch_size: mini-batch size.
        num_classes: C; by default 1 + the largest label seen.
        seed: seed of the shuffling.
        device: where to train; default the training features' device.

    Returns:
        ``top1``, ``top5`` (top-k accuracy with k = min(5, C)) on the test features, ``train_top1`` on the training
        features (both in eval mode), ``k``, ``loss`` [epochs] (mean training loss per epoch, numpy), ``protocol``
        (its name), and the trained head as CPU tensors: ``weight`` [C, d], ``bias`` [C], and with a BatchNorm
        ``running_mean`` [d], ``running_var`` [d].
    """
    spec = PROTOCOLS[protocol] if isinstance(protocol, str) else protocol
    Xtr, ytr, Xte, yte = _split_tensors(train_feats, train_labels, test_feats, test_labels, device)
    dev = Xtr.device
    if len(Xtr) < 2 or epochs < 1 or batch_size < 2 or lr <= 0:
        raise ValueError("need at least 2 training samples, epochs >= 1, batch_size >= 2 and lr > 0")
    largest = int(max(ytr.max().item(), yte.max().item() if len(yte) else 0))
    C = num_classes if num_classes is not None else largest + 1
    if largest >= C or min(ytr.min().item(), yte.min().item() if len(yte) else 0) < 0:
        raise ValueError(f"labels must lie in [0, {C})")

    head = bn_linear_head(Xtr.shape[1], C, spec.batchnorm).to(dev)
    if spec.optimizer == "adamw":
        opt: torch.optim.Optimizer = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=spec.weight_decay)
    else:
        opt = torch.optim.SGD(head.parameters(), lr=lr, momentum=0.9, weight_decay=spec.weight_decay)
    n = len(Xtr)
    starts = [i for i in range(0, n, batch_size) if not spec.batchnorm or min(batch_size, n - i) > 1]
    total_steps, t = epochs * len(starts), 0
    gen = torch.Generator(device="cpu").manual_seed(seed)
    losses = []
    head.train()
    for epoch in range(epochs):
        perm = torch.randperm(n, generator=gen).to(dev)
        total, seen = torch.zeros((), device=dev), 0  # summed on device: one host sync per epoch, not per step
        for i in starts:
            progress = epoch / epochs if spec.cosine_per == "epoch" else t / total_steps
            for group in opt.param_groups:
                group["lr"] = lr * 0.5 * (1.0 + math.cos(math.pi * progress))
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
    out = {"top1": top1, "top5": top5, "train_top1": train_top1, "k": k, "loss": np.asarray(losses),
           "protocol": spec.name, "weight": linear.weight.detach().cpu(), "bias": linear.bias.detach().cpu()}
    if spec.batchnorm:
        out.update(running_mean=norm.running_mean.cpu(), running_var=norm.running_var.cpu())
    return out
