"""On-disk format readers and writers on their own: IDX dtypes, and CIFAR pickles that must not run code."""

import pickle

import numpy as np
import pytest

from lab.data.formats import read_cifar_batch, read_idx, write_idx


def test_read_idx_other_dtypes_round_trip(tmp_path):
    for array in (np.arange(-6, 6, dtype=np.int32).reshape(3, 4), np.linspace(-1, 1, 5, dtype=np.float32)):
        got = read_idx(write_idx(tmp_path / f"a_{array.dtype}.idx.gz", array))
        assert got.dtype == array.dtype
        np.testing.assert_array_equal(got, array)
    with pytest.raises(ValueError):
        write_idx(tmp_path / "bad", np.zeros(3, np.uint64))


class _Hostile:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_cifar_reader_refuses_pickles_that_run_code(tmp_path, capsys):
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({"data": _Hostile(), "labels": [0]}))
    with pytest.raises(ValueError, match="refusing"):
        read_cifar_batch(path)
    assert "must never run" not in capsys.readouterr().out
