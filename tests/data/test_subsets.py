"""Class subsets, per-class caps and stratified splits, on label arrays alone."""

import numpy as np
import pytest

from lab.data.subsets import resolve_classes, select, stratified_split

NAMES = ("zero", "one", "two", "three")


@pytest.mark.parametrize(("classes", "source"), [
    (None, [0, 1, 2, 3]), (2, [0, 1]), ([3, 1], [3, 1]), (["two", 0], [2, 0]), ([np.int64(1)], [1]),
])
def test_resolve_classes_keeps_the_order_given(classes, source):
    assert resolve_classes(NAMES, classes) == source


@pytest.mark.parametrize(("classes", "pattern"), [
    (0, "has 4 classes"), (5, "has 4 classes"), ([4], "unknown class 4"), (["four"], "unknown class 'four'"),
    ([True], "unknown class True"), ([], "non-empty"), ([1, 1], "repeats"),
])
def test_resolve_classes_rejects_what_is_not_there(classes, pattern):
    with pytest.raises(ValueError, match=pattern):
        resolve_classes(NAMES, classes)


def test_select_relabels_in_file_order_and_caps():
    labels = np.array([3, 1, 0, 1, 3, 2, 3])
    keep, new = select(labels, [3, 1])
    assert keep.tolist() == [0, 1, 3, 4, 6] and new.tolist() == [0, 1, 1, 0, 0]
    keep, new = select(labels, [3, 1], max_per_class=1)
    assert keep.tolist() == [0, 1] and new.tolist() == [0, 1]
    keep, new = select(labels, [0, 1, 2, 3], limit=3)
    assert keep.tolist() == [0, 1, 2] and new.tolist() == [3, 1, 0]


def test_stratified_split_keeps_each_class_share_and_follows_the_seed():
    labels = np.repeat([0, 1, 2], [8, 4, 1])
    train, test = stratified_split(labels, 0.25, seed=0)
    assert np.bincount(labels[test], minlength=3).tolist() == [2, 1, 0]  # a class of one stays in training
    assert sorted([*train, *test]) == list(range(len(labels)))
    again, other = stratified_split(labels, 0.25, seed=0), stratified_split(labels, 0.25, seed=1)
    assert np.array_equal(again[1], test) and not np.array_equal(other[1], test)
    with pytest.raises(ValueError, match="test_fraction"):
        stratified_split(labels, 0.0, seed=0)
