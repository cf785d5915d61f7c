"""The browser's side of a live view's pace: it says when it has drawn the last frame it was sent, and only while
the view is on screen.

A job builds its next on-demand snapshot once the page asks (:meth:`lab.snapshots.cadence.Cadence.request`); a page that
asks on a timer is capped by the timer on a fast browser and queues frames for a slow one. :class:`FrameClock` wraps the
view it paces: the server counts each frame it pushes (:attr:`FrameClock.sent`), and the browser answers with that count
(:attr:`FrameClock.drawn`) once it has painted it, two animation frames later, if the view is visible (not in a hidden
tab or page, not scrolled out of sight). The page sends the next snapshot on that answer (it asked the job for it when
it sent the last, :class:`~lab.ui.follower.JobFollower`): a slow browser gets fewer, newer snapshots; a fast one as many
as the job makes; a hidden view is sent nothing. Until a browser shows the clock (a script, a test, a notebook executed
headless) :attr:`FrameClock.browser` is false and the page asks after each poll, as it would without one.
"""

from __future__ import annotations

from typing import Any

import panel as pn
import param
from panel.custom import Child, JSComponent


class FrameClock(JSComponent):
    """Wrap ``object`` (the live view it paces) and report when the browser has drawn each frame.

    Args:
        object: the view whose frames are counted; the clock is visible exactly where it is.
    """

    object = Child(doc="the live view this clock paces")
    sent = param.Integer(default=0, doc="frames pushed to the browser (the server counts them; a view rendered "
                                        "later starts from this count, and each frame's count then comes as a "
                                        "message, :meth:`tick`)")
    drawn = param.Integer(default=-1, doc="the last of them the browser painted while visible (-1: no browser yet)")

    # the browser's answers are not a user's action: they must not turn the page's busy indicator on and off (a
    # change of its style at every frame)
    _busy__ignore = ["drawn"]

    _esm = """
    export function render({ model, el }) {
      el.append(model.get_child("object"));
      let onScreen = false, sent = model.sent;
      const answer = () => {
        if (!onScreen || document.visibilityState === "hidden") return;  // nobody would see the next frame
        const n = sent;
        // the view's repaint for frame n is queued before this; two animation frames later it is on screen
        requestAnimationFrame(() => requestAnimationFrame(() => {
          if (model.drawn !== n) model.drawn = n;
        }));
      };
      const seen = new IntersectionObserver((entries) => {
        onScreen = entries[entries.length - 1].isIntersecting;
        answer();
      });
      seen.observe(el);
      document.addEventListener("visibilitychange", answer);
      model.on("msg:custom", (n) => { sent = n; answer(); });
      model.on("remove", () => {
        seen.disconnect();
        document.removeEventListener("visibilitychange", answer);
      });
    }
    """

    def __init__(self, object: Any = None, **params: Any) -> None:
        super().__init__(object=pn.panel(object) if object is not None else None, **params)

    @property
    def browser(self) -> bool:
        """Whether a browser has shown this clock (and answered at least once)."""
        return self.drawn >= 0

    @property
    def ready(self) -> bool:
        """Whether the next snapshot may be made: the browser drew the last one, or no browser shows the clock."""
        return not self.browser or self.drawn == self.sent

    def tick(self) -> None:
        """A frame was pushed to the view (call after its models changed, so the browser paints it first).

        The count goes to the browser as a message, not as a change of :attr:`sent`: Panel syncs a change of a
        parameter of a component that holds children by walking every model the children hold (the whole node
        grid), which cost the server more than drawing the frame did."""
        with param.discard_events(self):
            self.sent += 1
        self._send_msg(self.sent)

    @param.depends("drawn", watch=True)
    def _resend(self) -> None:
        """An answer for an older frame comes from a view that has not had the last count (rendered before the
        last message, or from a stale :attr:`sent`): send it the count again, so that it answers for the frame
        it shows rather than leave the page waiting for an answer that would never come."""
        if self.drawn != self.sent:
            self._send_msg(self.sent)
