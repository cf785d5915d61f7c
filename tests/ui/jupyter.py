"""A real JupyterLab for browser tests: started from this interpreter on a free loopback port, kept private.

The server runs ``python -m jupyterlab`` with no token or password, bound to 127.0.0.1, with its root, runtime,
config, settings and workspace folders in a temporary directory, and a ``python3`` kernelspec that runs this
interpreter (so neither a user's nor a system's kernels or settings are used). Nothing in it reaches outside the
machine: news and update checks are off.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from tests.waiting import deadline, scaled

KERNEL = "python3"
# in a page of this server: the open notebook's kernel is connected and idle (the server exposes the app in the
# browser)
JS_KERNEL_READY = """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle' && k.connectionStatus === 'connected'; }"""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def write_notebook(path: Path, cells: list[str]) -> Path:
    """Write an nbformat-4 notebook of code ``cells`` (source strings) using the ``python3`` kernel."""
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"cell-{i}", "metadata": {},
                     "outputs": [], "source": source} for i, source in enumerate(cells)],
          "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": KERNEL},
                       "language_info": {"name": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb, indent=1))
    return path


def _private_env(base: Path, extra: dict[str, str] | None) -> dict[str, str]:
    from ipykernel.kernelspec import install

    install(prefix=str(base), kernel_name=KERNEL)  # argv[0] is sys.executable
    # no "official Jupyter news?" prompt over the page
    notification = base / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True, exist_ok=True)
    notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    env = dict(os.environ)
    env.update({
        "JUPYTER_PATH": str(base / "share" / "jupyter"), "JUPYTER_CONFIG_DIR": str(base / "config"),
        "JUPYTER_DATA_DIR": str(base / "data"), "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(base / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
        "IPYTHONDIR": str(base / "ipython"), "PYTHONUNBUFFERED": "1"})
    env.update(extra or {})
    return env


def _get(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read().decode() or "null")


@contextlib.contextmanager
def jupyterlab(root: Path, state: Path, env: dict[str, str] | None = None, startup_timeout: float = 90.0,
               log: Path | None = None) -> Iterator[str]:
    """Run JupyterLab on ``root`` until the block ends; yields its base URL (``http://127.0.0.1:PORT``).

    Args:
        root: the folder the server shows (notebooks are opened relative to it).
        state: an empty folder for the server's private runtime, config, settings and kernelspec.
        env: extra environment for the server and its kernels (e.g. ``LAB_RUNS_DIR``).
        startup_timeout: seconds to wait for the server to answer.
        log: where the server's output goes (default ``state / "server.log"``).
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = log or state / "server.log"
    args = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}", "--ServerApp.port_retries=0", "--IdentityProvider.token=",
            "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True", f"--ServerApp.root_dir={root}",
            "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.expose_app_in_browser=True"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, cwd=root, env=_private_env(state, env), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        end = deadline(startup_timeout)
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                _get(f"{url}/api/status", timeout=2)
                break
            except (OSError, urllib.error.URLError):
                if time.monotonic() > end:
                    raise TimeoutError(f"JupyterLab did not answer in {scaled(startup_timeout):.0f} s:\n"
                                       f"{log.read_text()[-3000:]}") from None
                time.sleep(0.25)
        yield url
    finally:
        _stop(proc, url)


def _stop(proc: subprocess.Popen, url: str) -> None:
    """Stop the server and every process it started (kernels run in sessions of their own)."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    with contextlib.suppress(OSError, urllib.error.URLError):
        urllib.request.urlopen(urllib.request.Request(f"{url}/api/shutdown", method="POST"), timeout=5).close()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(children, timeout=5)
