"""Which examples a dataset keeps, decided on labels alone: class subsets, per-class caps, stratified splits.

A class subset is relabelled in the order given; the caps (`max_per_class`, `limit`) keep the first examples in
file order, so small runs are reproducible. Numpy arrays in, numpy arrays out: nothing here reads files or builds
tensors, so the loaders select on labels first and convert only the images they keep.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["Classes", "resolve_classes", "select", "stratified_split"]

Classes = int | Sequence[int | str] | None  # None: all classes; k: the first k; or label ids / names, in order


def resolve_classes(names: Sequence[str], classes: Classes) -> list[int]:
    """Original label ids kept, in the new label order.

    Args:
        names: every class name of the dataset, indexed by original label.
        classes: None for all; an int k for the first k classes (the subsets of 2, 4, 6 and 8 classes of *Residual
            Alignment: Uncovering the Mechanisms of Residual Networks*); or a list of label ids or names,
            relabelled 0..len-1 in the order given.

    Returns:
        The original label id of each new label.
    """
    if classes is None:
        return list(range(len(names)))
    if isinstance(classes, int):
        if not 1 <= classes <= len(names):
            raise ValueError(f"classes={classes}: this dataset has {len(names)} classes")
        return list(range(classes))
    chosen = []
    for c in classes:
        if isinstance(c, str) and c in names:
            chosen.append(names.index(c))
        elif isinstance(c, (int, np.integer)) and not isinstance(c, bool) and 0 <= c < len(names):
            chosen.append(int(c))
        else:
            raise ValueError(f"unknown class {c!r}; valid: indices 0..{len(names) - 1} or names {list(names)}")
    if not chosen or len(set(chosen)) != len(chosen):
        raise ValueError(f"classes must be a non-empty list without repeats, got {list(classes)}")
    return chosen


def select(
    labels: np.ndarray, source: list[int], max_per_class: int | None = None, limit: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the examples kept (file order) and their new labels.

    Args:
        labels: original label of every example [n].
        source: original label id of each new label, from :func:`resolve_classes`.
        max_per_class: keep at most this many examples of each class (the first ones).
        limit: keep at most this many examples in all (the first ones).

    Returns:
        `(indices, new_labels)`, both [n_kept].
    """
    lut = np.full(max(int(labels.max(initial=0)), *source) + 1, -1, np.int64)
    lut[source] = np.arange(len(source))
    new = lut[labels]
    keep = np.flatnonzero(new >= 0)
    if max_per_class is not None:
        keep = np.sort(np.concatenate([keep[new[keep] == c][:max_per_class] for c in range(len(source))]))
    if limit is not None:
        keep = keep[:limit]
    return keep, new[keep]


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split keeping each class's share: round(n_c * test_fraction) test examples, >= 1 each side if n_c >= 2.

    Args:
        labels: label of every example [n].
        test_fraction: held-out share of each class, in (0, 1).
        seed: seeds the permutation within each class; the same seed gives the same split.

    Returns:
        `(train_indices, test_indices)`, each sorted.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}: a split with no test (or no training) "
                         "samples leaves nothing to evaluate (as a config: data.train_fraction = 1 − test_fraction)")
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_test = int(round(len(idx) * test_fraction))
        n_test = min(max(n_test, 1), len(idx) - 1) if len(idx) >= 2 else 0
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))
