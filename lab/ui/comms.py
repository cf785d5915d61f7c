"""Panel's messages from the browser handled on the kernel's main thread, as in kernels without subshells.

JupyterLab (4.4 and later) sends comm messages to kernel *subshells* when the kernel supports them (ipykernel 7
and later): threads of their own, one per comm target by default, and ipykernel routes a comm's messages to the
subshell that last published on it. A click in a Panel output then changes that output's Bokeh document, and
pushes it, from a subshell thread, while the kernel's main thread (cells, periodic callbacks started there) does
the same to it or to other outputs. Bokeh documents are not thread-safe, and Panel sends one Bokeh message as
several comm messages: two pushes at once reach the browser interleaved ("Expected binary fragment but received
text fragment"), and the output stops following its model.

:func:`handle_on_main_thread` makes the handlers of pyviz_comms' comms, which carry every message from the browser
to Panel's outputs, run on the kernel's main event loop, in the order they arrived: every change to a page then
happens on one thread, as it did before subshells. The cost is the one kernels always had: a click waits while a
cell runs (the lab's training runs in background jobs, so cells return at once).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from pyviz_comms import Comm, JupyterCommJS
from tornado.ioloop import IOLoop

__all__ = ["handle_on_main_thread"]

_HANDLERS = ((Comm, "_handle_msg"), (JupyterCommJS, "_handle_open"))
_installed = False


def handle_on_main_thread(loop: IOLoop) -> None:
    """Run the handlers of every comm opened from now on on ``loop``, the kernel's main event loop (once per kernel).

    A handler called on the main thread runs at once; one called on another thread (a subshell) is handed to
    ``loop`` and runs there after what is already queued. Comms opened before this call keep their handlers.
    """
    global _installed
    if _installed:
        return
    for cls, name in _HANDLERS:
        setattr(cls, name, _on(loop, getattr(cls, name)))
    _installed = True


def _on(loop: IOLoop, handler: Callable[..., Any]) -> Callable[..., Any]:
    main = threading.main_thread()

    @functools.wraps(handler)
    def on_main(*args: Any) -> None:
        if threading.current_thread() is main:
            handler(*args)
        else:
            loop.add_callback(handler, *args)

    return on_main
