"""Data: toy 2-D sets with the evaluation grid, and image sets for the analysis experiments.

The image sets are in :mod:`lab.data.images`.
"""

from lab.data.grid import grid, grid_axis
from lab.data.toy2d import (
    TOY_DATASETS,
    ToyData,
    circle,
    gauss,
    make_points,
    make_toy_data,
    playground_spiral,
    spiral,
    train_test_split,
    xor,
)

__all__ = ["TOY_DATASETS", "ToyData", "circle", "gauss", "grid", "grid_axis", "make_points", "make_toy_data",
           "playground_spiral", "spiral", "train_test_split", "xor"]
