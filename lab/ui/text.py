"""Text from outside the lab, put into a page as text: one place that escapes it for Markdown panes and HTML.

Everything a run folder holds (its folder's name, status message, config values, metric keys, checkpoint names)
comes from other people and other machines, and everything typed into a page or its URL comes from whoever sent
the link. Panel's Markdown and Alert panes render raw HTML and run the scripts they hold, and its HTML pane shows
HTML as it is; so such text goes into a pane only through these functions:

* :func:`md` for running text: every ASCII punctuation character is backslash-escaped (CommonMark lets any of them
  be), so ``<img …>``, ``&amp;``, ``*``, ``[…](…)``, ``$…$`` and a backtick show as typed; line breaks are kept as
  line breaks and leading blanks as no-break spaces, so no line of it can start a heading, list, table or code block.
* :func:`code` for a name or value shown in code type: a backtick code span whose fence is longer than any run of
  backticks in the value, on one line.
* :func:`code_block` for a file's text (a config): a fenced block whose fence is longer than any run of backticks
  in it.
* :func:`html_text` for an HTML pane (the notebook displays of :mod:`lab.ui.display`).

Panes that show such text are made with :func:`markdown_pane` / :func:`alert_pane`, whose HTML holds no TeX
delimiter at all (:func:`no_tex`). Their ``disable_math=True`` alone does not reach the browser: Panel's Markdown
pane does not pass it on to its model, so the page's MathJax would render ``$$…$$``, ``\\(…\\)`` and ``\\[…\\]``
in any text (``\\href{javascript:…}`` becomes a link that runs a script), escaped or not.
"""

from __future__ import annotations

import html
import re
import string
from typing import Any

import panel as pn

_PUNCTUATION = re.compile("([" + re.escape(string.punctuation) + "])")
_BACKTICKS = re.compile("`+")
_LEADING_BLANKS = re.compile(r"^[ \t]+", re.MULTILINE)
NBSP = "\u00a0"


def md(value: Any, one_line: bool = False) -> str:
    """``value`` (any object: its ``str``) as Markdown that shows it literally.

    Every ASCII punctuation character gets a backslash, so nothing in it is markup (no HTML, link, emphasis, code,
    math or table cell); each line break becomes a hard line break and the blanks that start a line become no-break
    spaces, so no line starts a block (a heading, list, quote, table, code block) either.

    Args:
        value: the text (a file name, a status message, a typed path, an exception).
        one_line: join its lines with spaces (for a heading or a table cell, which cannot hold a line break).
    """
    lines = str(value).strip("\r\n").splitlines() or [""]
    if one_line:
        lines = [" ".join(line.strip() for line in lines)]
    escaped = [_PUNCTUATION.sub(r"\\\1", line.rstrip()) for line in lines]
    text = "\\\n".join(escaped)
    return _LEADING_BLANKS.sub(lambda m: NBSP * len(m.group().expandtabs(4)), text)


def clipped(value: Any, chars: int = 120) -> str:
    """``str(value)``, cut to its first ``chars`` characters with how many more it had: a value from a URL or a typed
    field may be megabytes long, and a notice quotes it to say which it was, not to show it all."""
    text = str(value)
    return text if len(text) <= chars else f"{text[:chars]} … ({len(text) - chars:,} more characters)"


def _fence(value: str, least: int) -> str:
    longest = max((len(m) for m in _BACKTICKS.findall(value)), default=0)
    return "`" * max(least, longest + 1)


def code(value: Any) -> str:
    """``value`` as a Markdown code span, shown literally in code type on one line (its line breaks become spaces).

    The fence is longer than any run of backticks in the value; a value that starts or ends with a backtick (or a
    blank) is padded with one space on each side, which CommonMark strips again.
    """
    text = " ".join(str(value).splitlines()) or " "
    fence = _fence(text, 1)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def code_block(text: str, language: str = "") -> str:
    """``text`` as a fenced Markdown code block (``language`` names its syntax: ``yaml``); the fence is longer than
    any run of backticks in it, so no line of it can end the block."""
    fence = _fence(text, 3)
    return f"{fence}{language}\n{text.rstrip(chr(10))}\n{fence}"


def html_text(value: Any) -> str:
    """``value`` as HTML text (``<``, ``>``, ``&`` and quotes escaped), for an HTML pane or a table cell."""
    return html.escape(str(value), quote=True)


_TEX = str.maketrans({"$": "&#36;", "\\": "&#92;"})


def no_tex(parser: Any) -> None:
    """A markdown-it plugin: the HTML it renders writes every ``$`` and ``\\`` as a character reference.

    The browser shows them as the characters, but the page's MathJax, which searches the HTML for ``$$``, ``$``,
    ``\\(`` and ``\\[``, finds no formula: not in text, code or anything else.
    """
    render = parser.render

    def render_without_tex(src: str, env: Any = None) -> str:
        return render(src, env).translate(_TEX)

    parser.render = render_without_tex


def markdown_pane(text: str = "", **params: Any) -> pn.pane.Markdown:
    """A Markdown pane for text that holds outside values (escaped with :func:`md` or :func:`code`): no math, in
    fact (:func:`no_tex`)."""
    return pn.pane.Markdown(text, disable_math=True, plugins=[no_tex], **params)


def alert_pane(text: str = "", **params: Any) -> pn.pane.Alert:
    """An Alert pane for messages that quote outside values (escaped with :func:`md` or :func:`code`): no math, in
    fact (:func:`no_tex`)."""
    return pn.pane.Alert(text, disable_math=True, plugins=[no_tex], **params)
