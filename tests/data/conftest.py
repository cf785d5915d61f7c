"""Shared fixtures of the data tests: scikit-learn's digits, loaded once."""

import pytest

from lab.data.images import ImageSplit, load_digits


@pytest.fixture(scope="session")
def sk_digits():
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    return sklearn_datasets.load_digits()


@pytest.fixture(scope="session")
def digits(sk_digits) -> ImageSplit:
    return load_digits()
