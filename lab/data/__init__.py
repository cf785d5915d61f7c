"""Data: toy 2-D sets with the evaluation grid, and image sets for the analysis experiments.

The image sets are in :mod:`lab.data.images`. The names below are imported when first used, so the modules that
need no torch (:mod:`lab.data.roots`, where a path typed into a page is resolved) load without it.
"""

from importlib import import_module
from typing import Any

_HOMES = {**{name: "lab.data.evaluation_grid" for name in ("grid", "grid_axis")},
          **{name: "lab.data.toy2d" for name in ("TOY_DATASETS", "ToyData", "circle", "gauss", "make_points",
                                                 "make_toy_data", "playground_spiral", "spiral", "train_test_split",
                                                 "xor")}}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'lab.data' has no attribute {name!r}")
