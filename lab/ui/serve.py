"""Serve lab pages from Python on a free local port: for tests, benchmarks and scripted demos."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import panel as pn
from tornado.ioloop import IOLoop


@contextlib.contextmanager
def serving(apps: dict[str, Any], address: str = "127.0.0.1") -> Iterator[str]:
    """``pn.serve`` on port 0 of ``address`` with its IO loop on a thread of its own; yields the base URL.

    Args:
        apps: URL slug → app (a script path, a function returning a Viewable, or a Viewable).
        address: interface to bind; loopback unless told otherwise.
    """
    loop = IOLoop(make_current=False)
    server = pn.serve(apps, port=0, address=address, show=False, start=False, loop=loop, verbose=False,
                      websocket_origin=[address, "localhost"])
    server.start()
    thread = threading.Thread(target=loop.start, name="lab-serve", daemon=True)
    thread.start()
    try:
        yield f"http://{address}:{server.port}"
    finally:
        loop.add_callback(server.stop)
        loop.add_callback(loop.stop)
        thread.join(10)
