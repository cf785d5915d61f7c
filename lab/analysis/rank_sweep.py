"""Feature rank against linear-probe accuracy, per member and layer, across the members of a sweep.

*Residual Connections Harm Generative Representation Learning* relates how low-rank a network's features are to
how well a linear probe reads them, across a sweep of shortcut decays (``model.alpha_min``). For K members with
L blocks each, this computes at every depth l = 0..L (h_0 the stem output, h_L the last block's output):

* two rank measures of the held-out features, deliberately both and under distinct names, because that paper's
  "effective rank" is not Roy & Vetterli's (see :mod:`lab.analysis.rank`):

  - ``effective_rank``: Roy & Vetterli's exp(H) of the singular values of the raw feature matrix [n, H];
  - ``eq6_entropy``: the paper's Eq. 6, the entropy H (nats) of the singular values of the sample-by-sample
    covariance (``feature_rank(..., measure="entropy")``), the number its figures plot;

* ``probe_acc``: the held-out accuracy of a linear read-out fitted on training features;

and, across members, the Pearson correlation of final-layer rank with final-layer probe accuracy.

The probe is closed-form ridge regression onto one-hot labels (a least-squares classifier), not
:func:`lab.analysis.probing.linear_probe`'s logistic regression: one batched solve serves all K × (L + 1)
layers and is deterministic. Measured on one CPU thread for 6 members of the 32 × 32 MLP (198 layers, 512
points each): about 50 ms for all layers, against 18 ms *per layer* (3.6 s in all) for ``linear_probe`` with 10
epochs, too slow for a live page. On separable classes both reach 1.0; the least-squares read-out can score below
the logistic one on classes a logistic probe separates only with a large weight, which makes it a slightly
stricter measure of linear decodability.

Features come in stacked, ``[K, L+1, n, H]``, so the metrics do not care how they were computed;
:func:`member_features` stacks them from the members' models.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lab.analysis.embed import pca
from lab.analysis.rank import effective_rank, feature_rank

__all__ = ["few_label_probe_accuracy", "layer_rank_metrics", "member_features", "pearson_r", "ridge_probe_accuracy",
           "sweep_rank_metrics"]

FEW_LABELS = 5
"""Labelled training points per class of the few-label probe."""
FEW_DRAWS = 20
"""Draws of those points the few-label probe's accuracy is averaged over."""


@torch.no_grad()
def member_features(models: Sequence[nn.Module], x: Tensor) -> Tensor:
    """The residual stream of every member at every depth, in eval mode (no droppath).

    Args:
        models: K models with ``forward_intermediates`` (e.g. :class:`~lab.nn.mlp.ResidualMLP`), all of one
            architecture; each is put back in the mode it was in.
        x: inputs [n, in], on the models' device.

    Returns:
        Features [K, L+1, n, H]: h_0 (stem output) … h_L (last block's output) of each member.
    """
    stacks = []
    for model in models:
        was_training = model.training
        model.eval()
        try:
            stacks.append(torch.stack(model.forward_intermediates(x, intermediates_only=True)))
        finally:
            model.train(was_training)
    return torch.stack(stacks)


def ridge_probe_accuracy(train_features: Tensor, train_labels: Tensor, test_features: Tensor, test_labels: Tensor,
                         *, ridge: float = 1e-3, num_classes: int | None = None) -> Tensor:
    """Held-out accuracy of a ridge-regression classifier, for a batch of feature sets at once.

    Features are standardised with the training set's mean and std (std floored at 1e-6, as ``linear_probe``),
    so one ``ridge`` suits layers of any scale; then W = (ZᵀZ + ridge · n · I)⁻¹ Zᵀ (Y − Ȳ) with Y the one-hot
    training labels, and a test point's class is the argmax of z W + Ȳ. Collapsing features (the subject of rank
    studies) make ZᵀZ nearly singular; the penalty bounds the system's condition number by (d + ridge) / ridge,
    and the small d × d solve runs in float64, so float32 features lose nothing that changes an argmax.

    Args:
        train_features: [..., n, d]; each leading index is one feature set (e.g. one member's layer).
        train_labels: [n] integer labels in [0, C).
        test_features: [..., m, d].
        test_labels: [m].
        ridge: penalty relative to a standardised feature's sum of squares (n).
        num_classes: C; by default 1 + the largest label seen.

    Returns:
        Accuracy [...] on the test set, float64.
    """
    Xtr, Xte = train_features, test_features
    dtype, dev = Xtr.dtype, Xtr.device
    ytr, yte = train_labels.to(dev, torch.long), test_labels.to(dev, torch.long)
    C = num_classes if num_classes is not None else int(max(ytr.max(), yte.max() if len(yte) else 0)) + 1
    mean = Xtr.mean(dim=-2, keepdim=True)
    std = Xtr.std(dim=-2, correction=0, keepdim=True).clamp_min(1e-6)
    Ztr, Zte = (Xtr - mean) / std, (Xte - mean) / std
    Y = F.one_hot(ytr, C).to(dtype)
    Ybar = Y.mean(dim=0)
    n, d = Ztr.shape[-2:]
    gram = (Ztr.transpose(-1, -2) @ Ztr).to(torch.float64)  # [..., d, d]
    gram = gram + ridge * n * torch.eye(d, dtype=torch.float64, device=dev)
    W = torch.linalg.solve(gram, (Ztr.transpose(-1, -2) @ (Y - Ybar)).to(torch.float64)).to(dtype)  # [..., d, C]
    hits = ((Zte @ W + Ybar).argmax(dim=-1) == yte).to(torch.float64)
    return hits.mean(dim=-1)


def few_label_probe_accuracy(train_features: Tensor, train_labels: Tensor, test_features: Tensor,
                             test_labels: Tensor, *, per_class: int = FEW_LABELS, draws: int = FEW_DRAWS,
                             ridge: float = 1e-1, num_classes: int | None = None, seed: int = 0) -> Tensor:
    """Held-out accuracy of a ridge probe fitted on ``per_class`` labelled points of each class, averaged over
    ``draws`` draws of those points (the same draws for every feature set).

    The lab's addition to the papers' full linear probe: on 8 × 8 digits a probe of every training label sits near
    its ceiling for any reasonable features, while one that sees five digits of each class tells features apart
    by how directly they separate the classes (as few-shot evaluation of self-supervised features does).

    Args:
        train_features: [..., n, d] (each leading index one feature set).
        train_labels: [n] integer labels in [0, C); every class needs ``per_class`` points.
        test_features: [..., m, d].
        test_labels: [m].
        per_class: labelled points per class.
        draws: draws averaged.
        ridge: the probe's relative ridge penalty (larger than the full probe's: few points, many features).
        num_classes: C; by default 1 + the largest label.
        seed: the draws' seed.

    Returns:
        Mean accuracy [...] over the draws, float64.

    Raises:
        ValueError: a class with fewer than ``per_class`` training points.
    """
    labels = train_labels.cpu()
    C = num_classes if num_classes is not None else int(max(labels.max(), test_labels.max())) + 1
    members = [torch.nonzero(labels == c).flatten() for c in range(C)]
    short = [c for c, idx in enumerate(members) if len(idx) < per_class]
    if short:
        raise ValueError(f"classes {short} have fewer than {per_class} training points")
    generator = torch.Generator().manual_seed(seed)
    total = None
    for _ in range(draws):
        pick = torch.cat([idx[torch.randperm(len(idx), generator=generator)[:per_class]] for idx in members])
        pick = pick.to(train_features.device)
        acc = ridge_probe_accuracy(train_features.index_select(-2, pick), train_labels.to(pick.device)[pick],
                                   test_features, test_labels, ridge=ridge, num_classes=C)
        total = acc if total is None else total + acc
    return total / draws


def pearson_r(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson r of the pairs where both are finite; NaN with fewer than 3 pairs or zero variance in either."""
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok].astype(np.float64), b[ok].astype(np.float64)
    if len(a) < 3:
        return float("nan")
    da, db = a - a.mean(), b - b.mean()
    denom = np.sqrt((da * da).sum() * (db * db).sum())
    return float((da * db).sum() / denom) if denom > 0 else float("nan")


@torch.no_grad()
def sweep_rank_metrics(train_features: Tensor, train_labels: Tensor, test_features: Tensor, test_labels: Tensor,
                       *, ridge: float = 1e-3, num_classes: int | None = None,
                       correlate: Sequence[bool] | np.ndarray | None = None, layer: int = -1,
                       few_labels: bool = False) -> dict[str, np.ndarray]:
    """Rank, probe accuracy and their correlation across K members, at every depth.

    Shapes: K members, L + 1 depths, n training and m held-out points, width H. Ranks are measured on the
    held-out features; the probe is fitted on the training features and scored on the held-out ones
    (:func:`ridge_probe_accuracy`). For the ranks and the probe, each member's layer is first divided by its
    largest ``|entry|`` (both are scale-invariant, and a member about to diverge can have finite features whose squares
    overflow float32). A member whose features (train or held-out, any depth) are not all finite gets NaN rows and
    PCA and stays out of the correlations, so one exploding member cannot poison a snapshot.

    Args:
        train_features: [K, L+1, n, H] features of the probe's training points (:func:`member_features`).
        train_labels: [n].
        test_features: [K, L+1, m, H] held-out features.
        test_labels: [m].
        ridge: the probe's relative ridge penalty.
        num_classes: C; by default 1 + the largest label seen.
        correlate: [K] which members enter the Pearson correlations (default all); e.g. leave out diverged ones.
        layer: the depth whose features are the members' representation (the correlations, the PCA and the
            few-label probe read it): the last (-1) for a classifier, a U-Net's bottleneck for the toy MAE.
        few_labels: also ``probe_few`` [K], the few-label probe of that layer
            (:func:`few_label_probe_accuracy`).

    Returns:
        ``effective_rank`` [K, L+1] (Roy & Vetterli exp(H) of the held-out feature matrix's singular values),
        ``eq6_entropy`` [K, L+1] (the paper's Eq. 6: entropy in nats of the sample-by-sample covariance's
        singular values), ``probe_acc`` [K, L+1] (held-out accuracy of the ridge probe), float32;
        ``pearson_r_effective_rank`` and ``pearson_r_eq6_entropy`` (float64 scalars: Pearson r across members of the
        representation layer's measure against its ``probe_acc``; NaN with fewer than 3 members or zero variance);
        ``pca`` [K, m, 2] float32, each member's held-out representation on its top two principal axes;
        ``labels`` [m] int64, the held-out labels; ``layer`` (int64), the representation's depth.
    """
    if train_features.ndim != 4 or test_features.ndim != 4 or train_features.shape[:2] != test_features.shape[:2]:
        raise ValueError(f"features must be [K, L+1, n, H] and [K, L+1, m, H]; got {tuple(train_features.shape)} "
                         f"and {tuple(test_features.shape)}")
    K = train_features.shape[0]
    keep = np.ones(K, bool) if correlate is None else np.asarray(correlate, bool)
    if keep.shape != (K,):
        raise ValueError(f"correlate must hold one flag per member ({K}); got shape {keep.shape}")
    # the largest |entry| of each member's layer [K, L+1] is NaN or inf exactly when the layer is not finite
    scale = torch.maximum(train_features.abs().amax(dim=(-2, -1)), test_features.abs().amax(dim=(-2, -1)))
    bad = ~torch.isfinite(scale).all(dim=1)
    if bad.any():  # zero features stand in for a non-finite member's so the batched SVDs run; its rows become NaN
        train_features = torch.where(bad[:, None, None, None], 0.0, train_features)
        test_features = torch.where(bad[:, None, None, None], 0.0, test_features)
        scale = torch.where(bad[:, None], 1.0, scale)
    layer = layer % train_features.shape[1]
    final = test_features[:, layer].to(torch.float64)  # PCA in the features' own units (float64 holds squares)
    scale = scale.clamp_min(torch.finfo(scale.dtype).tiny)[..., None, None]
    train_features, test_features = train_features / scale, test_features / scale
    rank = effective_rank(test_features).cpu().numpy().astype(np.float32)
    entropy = feature_rank(test_features, measure="entropy").cpu().numpy().astype(np.float32)
    probe = ridge_probe_accuracy(train_features, train_labels, test_features, test_labels, ridge=ridge,
                                 num_classes=num_classes).cpu().numpy().astype(np.float32)
    coords = np.stack([pca(final[k], 2)[0].cpu().numpy() for k in range(K)]).astype(np.float32)
    bad_np = bad.cpu().numpy()
    out = {"probe_few": few_label_probe_accuracy(train_features[:, layer], train_labels, test_features[:, layer],
                                                 test_labels, num_classes=num_classes).cpu().numpy().astype(np.float32)
           } if few_labels else {}
    for array in (rank, entropy, probe, coords, *out.values()):
        array[bad_np] = np.nan
    return {
        "effective_rank": rank,
        "eq6_entropy": entropy,
        "probe_acc": probe,
        **out,
        "pearson_r_effective_rank": np.float64(pearson_r(rank[keep, layer], probe[keep, layer])),
        "pearson_r_eq6_entropy": np.float64(pearson_r(entropy[keep, layer], probe[keep, layer])),
        "pca": coords,
        "labels": test_labels.cpu().numpy().astype(np.int64),
        "layer": np.int64(layer),
    }


def layer_rank_metrics(train_features: Sequence[Tensor], train_labels: Tensor, test_features: Sequence[Tensor],
                       test_labels: Tensor, *, ridge: float = 1e-3,
                       num_classes: int | None = None) -> dict[str, np.ndarray]:
    """:func:`sweep_rank_metrics`' per-layer measures for one network whose layers may differ in width (a conv net's
    stages, a ViT's tokens): each layer measured on its own, exactly as a one-member sweep measures it.

    Args:
        train_features: L+1 tensors ``[n, H_l]``, the probe's training points at each depth.
        train_labels: [n].
        test_features: L+1 tensors ``[m, H_l]``, held-out points.
        test_labels: [m].
        ridge: the probe's relative ridge penalty.
        num_classes: C; by default 1 + the largest label seen.

    Returns:
        ``effective_rank``, ``eq6_entropy``, ``probe_acc`` [L+1] float32 (NaN for a layer that is not finite) and
        ``width`` [L+1] int64.
    """
    if len(train_features) != len(test_features) or not train_features:
        raise ValueError(f"need the same layers of training and held-out features, got {len(train_features)} and "
                         f"{len(test_features)}")
    keys = ("effective_rank", "eq6_entropy", "probe_acc")
    out: dict[str, list[float]] = {key: [] for key in keys}
    for tr, te in zip(train_features, test_features, strict=True):
        one = sweep_rank_metrics(tr[None, None], train_labels, te[None, None], test_labels, ridge=ridge,
                                 num_classes=num_classes)
        for key in keys:
            out[key].append(float(one[key][0, 0]))
    return {**{key: np.asarray(v, np.float32) for key, v in out.items()},
            "width": np.asarray([f.shape[-1] for f in train_features], np.int64)}
