"""Text from a run folder in a Bokeh figure (a title, an axis label, a tick label), drawn as it is typed.

Bokeh 3 typesets any title, axis label or tick label given as a string that holds a TeX delimiter (``$$…$$``,
``\\[…\\]`` or ``\\(…\\)``) anywhere in it: the browser parses every such string for them and turns the string into a
formula, loading MathJax to draw it. A metric's name, a sweep member's name or anything else a run folder holds comes
from other people, so a metric named ``$$x^2$$`` would be drawn as x², and a name holding ``\\href{…}`` as a link.
Such text is given to Bokeh as a :class:`~bokeh.models.PlainText` model instead, which the browser draws as it is,
never parsed. The lab's own fixed titles need none of this.
"""

from __future__ import annotations

from typing import Any

from bokeh.models import PlainText, Title


def plain(text: Any) -> PlainText:
    """``text`` (any object: its ``str``) as Bokeh text that is never typeset, for an axis label
    (``axis.axis_label``), a tick label (``axis.major_label_overrides``) or a :class:`~bokeh.models.Title`."""
    return PlainText(text=str(text))


def plain_title(text: Any) -> Title:
    """A figure's title showing ``text`` as it is (``figure(title=plain_title(name))``)."""
    return Title(text=plain(text))
