"""Views: snapshot arrays → HoloViews elements. Pure functions; no Panel state, no training."""

from bokeh.core.validation import silence
from bokeh.core.validation.warnings import FIXED_SIZING_MODE

# The lab's plots are sized by their drawing area (frame_width/frame_height): HoloViews gives such a figure the
# "fixed" sizing mode without width and height, and Bokeh draws it at exactly its frame size plus axes, but its
# document check still reports W-1005 FIXED_SIZING_MODE for every one. Setting width/height to silence it would
# shrink the frame (they count the axes), so the check is turned off instead.
silence(FIXED_SIZING_MODE, True)

# HoloViews draws every Bokeh figure with WebGL by default. The lab's figures are small (a mosaic image, a few
# thousand points, curves of at most a few thousand points), which the 2D canvas draws at once; WebGL only pays off
# for far larger ones, and where the browser has no GPU (a headless or remote browser, a cluster's login node) it is
# emulated in software and every repaint copies the GL canvas back: most of the browser's time on a live page.
from holoviews.plotting.bokeh.renderer import BokehRenderer  # noqa: E402

BokehRenderer.webgl = False
