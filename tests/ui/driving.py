"""Driving a page without a server: poll its jobs until a condition holds."""

import html
import time
from html.parser import HTMLParser

from tests.waiting import deadline


def poll_until(page, predicate, timeout: float = 90.0) -> bool:
    """Call ``page.poll()`` until ``predicate()`` is true or ``timeout`` seconds of an idle machine pass (scaled by
    :func:`tests.waiting.deadline`); returns whether it came true."""
    end = deadline(timeout)
    while time.monotonic() < end:
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


def kill_child_then_start_again(page, jobs) -> None:
    """SIGKILL the child process training ``jobs`` (the page's): at the next polls (within 2 s on an idle machine, not
    after a heartbeat goes stale) every one of them is failed, and the page's status line and alert say so with the
    exit code; then Reset and Start train a new run (the server went on)."""
    import os
    import signal

    os.kill(jobs[0].proc.pid, signal.SIGKILL)
    assert poll_until(page, lambda: all(j.status()["state"] == "failed" for j in jobs)
                      and "failed" in page.follower.status.message, timeout=2)
    assert "exited with code -9" in shown(page.follower.status.alert)
    page.param.trigger("reset")
    page.param.trigger("play")
    assert poll_until(page, lambda: page.job.status()["state"] == "running", timeout=30)
    page.param.trigger("reset")
