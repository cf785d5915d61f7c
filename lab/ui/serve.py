"""Serve lab pages from Python on a free local port: for tests, benchmarks and scripted demos."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import panel as pn
from tornado.ioloop import IOLoop

from lab.jobs.manager import get_manager, shutdown_manager


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


APP = Path(__file__).resolve().parents[2] / "apps" / "main.py"


@contextlib.contextmanager
def serving_lab(runs_dir: str | Path, max_jobs: int = 2, address: str = "127.0.0.1",
                processes: bool = True) -> Iterator[str]:
    """The lab's ``apps/main.py`` served at ``/apps`` as ``panel serve apps/`` would, with a process-wide job
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
