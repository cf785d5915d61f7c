"""Driving a page without a server: poll its jobs until a condition holds."""

import time


def poll_until(page, predicate, timeout: float = 90.0) -> bool:
    """Call ``page.poll()`` until ``predicate()`` is true or ``timeout`` seconds pass; returns whether it came true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        page.poll()
        if predicate():
            return True
        time.sleep(0.05)
    return False
