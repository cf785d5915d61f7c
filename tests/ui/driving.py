"""Driving a page without a server: poll its jobs until a condition holds."""

import html
import time
from html.parser import HTMLParser


def poll_until(page, predicate, timeout: float = 90.0) -> bool:
    """Call ``page.poll()`` until ``predicate()`` is true or ``timeout`` seconds pass; returns whether it came true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        page.poll()
        if predicate():
            return True
        time.sleep(0.05)
    return False


def shown(pane) -> str:
    """The text a Markdown or Alert pane shows: its object rendered as Panel renders it, tags dropped, entities
    decoded (outside values are escaped Markdown in ``pane.object``: compare what the reader sees)."""
    rendered = html.unescape(pane._transform_object(pane.object)["object"])  # Panel escapes the HTML it sends
    parser = _Text()
    parser.feed(rendered)
    parser.close()
    return "".join(parser.parts).strip()


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)
