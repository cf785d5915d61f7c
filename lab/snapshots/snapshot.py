"""A snapshot: one kind's arrays at one training step, as a job publishes it, a view draws it and a run folder keeps
it (``snapshots/<kind>-<version>.npz``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from lab.runs.store import Run


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


def load_saved(run: Run, kind: str, version: int | None = None) -> tuple[int, Snapshot] | None:
    """``(version, snapshot)`` of ``run``'s saved snapshot of ``kind`` (that version, or the latest readable one:
    :meth:`~lab.runs.store.Run.load_snapshot`), widened back to float32 for the views; None if there is none."""
    found = run.load_snapshot(kind, version)
    return None if found is None else (found[0], Snapshot(kind, found[1]).float32())
