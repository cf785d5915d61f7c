"""ImageSplit: flattening, normalization and its record, standardization with training statistics."""

import pytest
import torch

from lab.data.images import ImageSplit


def test_flat_is_a_view_and_standardize_uses_train_statistics(digits):
    flat = digits.flat()
    assert flat.input_shape == (64,) and flat.x_train.shape == (len(digits.x_train), 64)
    assert flat.x_train.data_ptr() == digits.x_train.data_ptr()  # a view, not a copy
    std = digits.standardize()
    assert torch.allclose(std.x_train.mean(), torch.tensor(0.0), atol=1e-5)
    assert torch.allclose(std.x_train.std(correction=0), torch.tensor(1.0), atol=1e-4)
    m, s = digits.x_train.mean(), digits.x_train.std(correction=0)
    assert torch.allclose(std.x_test, (digits.x_test - m) / s, atol=1e-5)  # test normalized with *train* stats
    assert std.mean == pytest.approx((m.item(),)) and std.std == pytest.approx((s.item(),))
    assert "normalized" in repr(std) and "digits" in repr(digits)


def test_normalized_per_channel_and_composition():
    x = torch.rand(6, 3, 4, 4)
    split = ImageSplit(x, torch.arange(6) % 2, x[:2], torch.tensor([0, 1]), ("a", "b"), "toy")
    once = split.normalized([0.5, 0.4, 0.3], [0.2, 0.25, 0.5])
    assert torch.allclose(once.x_train[:, 1], (x[:, 1] - 0.4) / 0.25)
    twice = once.normalized(0.1, 2.0)
    m, s = torch.tensor(twice.mean).view(1, 3, 1, 1), torch.tensor(twice.std).view(1, 3, 1, 1)
    assert torch.allclose(twice.x_train, (x - m) / s, atol=1e-6)  # the record describes the whole map
    with pytest.raises(ValueError):
        split.normalized([0.5, 0.5], 1.0)
    with pytest.raises(ValueError):
        split.normalized(0.5, 0.0)
    with pytest.raises(ValueError):
        ImageSplit(x, torch.zeros(5, dtype=torch.int64), x, torch.zeros(6, dtype=torch.int64), ("a",), "bad")
    train, test = split.datasets()
    assert len(train) == 6 and len(test) == 2
