"""Serve the lab from Python: ``residual-lab serve``, and on a free local port for tests, benchmarks and demos."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import panel as pn
from tornado.ioloop import IOLoop

from lab.jobs.manager import get_manager, shutdown_manager


def _server(apps: dict[str, Any], port: int, address: str, loop: IOLoop) -> Any:
    """A Bokeh server for ``apps`` on ``address:port`` (0: a free port), not started, on ``loop``."""
    return pn.serve(apps, port=port, address=address, show=False, start=False, loop=loop, verbose=False,
                    websocket_origin=[address, "localhost"])


@contextlib.contextmanager
def serving(apps: dict[str, Any], address: str = "127.0.0.1") -> Iterator[str]:
    """``pn.serve`` on port 0 of ``address`` with its IO loop on a thread of its own; yields the base URL.

    Args:
        apps: URL slug → app (a script path, a function returning a Viewable, or a Viewable).
        address: interface to bind; loopback unless told otherwise.
    """
    loop = IOLoop(make_current=False)
    server = _server(apps, 0, address, loop)
    server.start()
    thread = threading.Thread(target=loop.start, name="lab-serve", daemon=True)
    thread.start()
    try:
        yield f"http://{address}:{server.port}"
    finally:
        loop.add_callback(server.stop)
        loop.add_callback(loop.stop)
        thread.join(10)


APP = Path(__file__).resolve().with_name("app.py")
"""The lab's app as the script the Bokeh server runs for each session (:mod:`lab.ui.app`)."""


@contextlib.contextmanager
def serving_lab(runs_dir: str | Path, max_jobs: int = 2, address: str = "127.0.0.1",
                processes: bool = True) -> Iterator[str]:
    """The lab's app (:data:`APP`) served at ``/apps`` as ``panel serve apps/`` would, with a process-wide job
    manager of its own writing into ``runs_dir``; yields the base URL. The manager is shut down afterwards.

    Args:
        runs_dir: the runs folder every page's job writes into.
        max_jobs: concurrent training jobs.
        address: interface to bind; loopback unless told otherwise.
        processes: the pages' toy runs and sweeps train in child processes (:class:`~lab.jobs.child.ChildJob`), as
            ``panel serve apps/`` trains them; False: in the server's threads.
    """
    shutdown_manager()  # the lab's pages take the process-wide manager: make it this one
    get_manager(runs_dir=runs_dir, max_jobs=max_jobs, processes=processes)
    try:
        with serving({"apps": str(APP)}, address=address) as url:
            yield url
    finally:
        shutdown_manager()


def serve_lab(port: int = 5006, address: str = "127.0.0.1", *, runs_dir: str | Path | None = None,
              max_jobs: int = 2, processes: bool = True, show: bool = False) -> None:
    """``residual-lab serve``: the lab's app at ``http://ADDRESS:PORT/apps`` until SIGINT or SIGTERM, as ``panel serve
    apps/`` serves it from a checkout, from wherever the package is installed. Prints the URL once it answers
    (port 0 takes a free one); every job is stopped, its checkpoint kept, before this returns.

    Args:
        port, address: where to listen; loopback unless told otherwise.
        runs_dir: the runs folder (default ``$LAB_RUNS_DIR`` or ``./runs``).
        max_jobs, processes: the job manager's bounds (:class:`~lab.jobs.manager.JobManager`).
        show: open a browser tab.
    """
    import torch

    torch.set_num_threads(1)  # as apps/server_lifecycle.py: one core trains, the other serves the pages
    shutdown_manager()
    get_manager(runs_dir=runs_dir, max_jobs=max_jobs, processes=processes)
    loop = IOLoop(make_current=False)
    server = _server({"apps": str(APP)}, port, address, loop)
    for sig in (signal.SIGINT, signal.SIGTERM):  # handled on the loop itself (this runs in the main thread)
        loop.asyncio_loop.add_signal_handler(sig, loop.stop)
    server.start()
    url = f"http://{address}:{server.port}/apps"
    print(f"Residual Lab at {url}", flush=True)
    if show:
        loop.add_callback(server.show, "/apps")
    try:
        loop.start()
    finally:
        server.stop()
        shutdown_manager()
