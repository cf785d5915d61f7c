"""A snapshot: one kind's arrays at one training step, as a job publishes it, a view draws it and a run folder keeps
it (``snapshots/<kind>-<version>.npz``)."""

from __future__ import annotations

import numpy as np


class Snapshot(dict):
    """One published snapshot: its arrays by name (a plain ``dict`` to every consumer) plus its ``kind``.

    The step it was taken at is the ``"step"`` entry. In a notebook (after :func:`lab.ui.extension`) it displays
    as a table of its arrays and the view of its kind.
    """

    def __init__(self, kind: str, arrays: dict[str, np.ndarray], forced: bool = False) -> None:
        super().__init__(arrays)
        self.kind = kind
        self.forced = forced  # taken because training started, paused or ended, not on its cadence

    @property
    def step(self) -> int | None:
        return int(self["step"]) if "step" in self else None

    def float32(self) -> Snapshot:
        """The same snapshot with float16 arrays (as stored on disk) widened back to float32."""
        return Snapshot(self.kind, {k: (v.astype(np.float32) if getattr(v, "dtype", None) == np.float16 else v)
                                    for k, v in self.items()})
