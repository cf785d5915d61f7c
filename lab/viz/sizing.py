"""Plots sized by their drawing area (``frame_width``/``frame_height``), as the lab's views are."""

from __future__ import annotations

from typing import Any


def frame_sized(plot: Any, element: Any) -> None:
    """HoloViews hook for a plot sized by ``frame_width``/``frame_height``.

    HoloViews marks such a figure's sizing mode ``"fixed"``, and Bokeh's document check then asks for ``width`` and
    ``height`` as well (``W-1005 FIXED_SIZING_MODE``). With no sizing mode the figure takes exactly its frame size
    plus axes, which is what was meant.
    """
    plot.state.sizing_mode = None
