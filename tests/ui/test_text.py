"""Outside text in a Markdown pane: rendered by Panel's own parser, it shows exactly as typed and makes no markup."""

import html
import re

import panel as pn
import pytest

from lab.ui.text import alert_pane, code, code_block, html_text, markdown_pane, md
from tests.ui.driving import shown

HOSTILE = [
    "<img src=x onerror=alert(1)>.png",
    "<script>alert(2)</script>",
    "<b>bold</b> &amp; &lt; *em* _em_ **strong** ~~del~~ `tick` ``two``",
    "$x$ and $$y$$ \\(z\\) [link](javascript:alert(3)) <https://example.com> http://example.com :smile:",
    "# heading\n- item\n1. item\n> quote\n| a | b |\n|---|---|\n=====\n    indented\n\n```\nfence",
    "ends in a backslash \\",
    "[^1] term\n: definition\n- [ ] task",
]


def _tags(html: str) -> set[str]:
    return set(re.findall(r"<\s*([a-zA-Z][\w-]*)", html))


def _render(text: str) -> str:
    """The HTML Panel's Markdown pane makes of ``text`` (it sends it escaped once more)."""
    return html.unescape(pn.pane.Markdown(text)._transform_object(text)["object"])


@pytest.mark.parametrize("value", HOSTILE)
def test_md_shows_any_text_as_typed_and_makes_no_markup(value):
    text = md(value)
    assert _tags(_render(text)) <= {"p", "br"}
    lines = [line.strip() for line in value.strip().splitlines()]
    assert [line.strip() for line in shown(markdown_pane(text)).splitlines()] == lines
    one = md(value, one_line=True)
    assert "\n" not in one and shown(markdown_pane(f"### {one}")) == " ".join(lines)


@pytest.mark.parametrize("value", HOSTILE)
def test_a_code_span_shows_any_value_on_one_line(value):
    assert _tags(_render(f"see {code(value)} here")) <= {"p", "code"}
    assert shown(markdown_pane(f"see {code(value)} here")) == f"see {' '.join(value.splitlines())} here"


def test_a_code_block_holds_any_text_until_its_own_fence():
    text = "a: ```\n```\n<b>x</b>\n````"
    block = code_block(text, "yaml")
    assert block.startswith("`````yaml\n") and block.endswith("\n`````")
    assert shown(markdown_pane(block)).strip() == text


def test_html_text_and_panes_without_math():
    assert html_text('<a href="x">&</a>') == "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;"
    assert markdown_pane("x").disable_math and alert_pane("x", alert_type="danger").disable_math
    assert not pn.pane.Markdown("x").disable_math, "Panel's default renders $…$ as math: the helpers turn it off"
