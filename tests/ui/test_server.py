"""The lab served for real: ``pn.serve`` on port 0, and a real browser driving Debian's Chromium."""

from __future__ import annotations

import contextlib
import shutil
import threading
import urllib.request
from pathlib import Path

import panel as pn
import pytest
from tornado.ioloop import IOLoop

from lab.jobs.manager import JobManager
from lab.ui.shell import LabShell

pytestmark = pytest.mark.ui
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
APPS = Path(__file__).resolve().parents[2] / "apps" / "main.py"


@pytest.fixture
def server(tmp_path, monkeypatch):
    """The real apps/main.py served by pn.serve on a free port of 127.0.0.1, with its own runs folder."""
    monkeypatch.setenv("LAB_RUNS_DIR", str(tmp_path / "runs"))
    import lab.jobs.manager as manager_module

    monkeypatch.setattr(manager_module, "_MANAGER", JobManager(tmp_path / "runs", max_jobs=2))
    with serving({"apps": str(APPS)}) as url:
        yield url
    manager_module._MANAGER.shutdown()


@contextlib.contextmanager
def serving(apps):
    """pn.serve on port 0 of 127.0.0.1, its IO loop on a thread of its own; yields the base URL."""
    loop = IOLoop(make_current=False)
    server = pn.serve(apps, port=0, address="127.0.0.1", show=False, start=False, loop=loop, verbose=False,
                      websocket_origin=["127.0.0.1", "localhost"])
    server.start()
    thread = threading.Thread(target=loop.start, daemon=True)
    thread.start()
    try:
        assert server.port, "the server did not bind a port"
        yield f"http://127.0.0.1:{server.port}"
    finally:
        loop.add_callback(server.stop)
        loop.add_callback(loop.stop)
        thread.join(10)


def test_serve_answers_on_apps(server):
    url = server
    with urllib.request.urlopen(f"{url}/apps", timeout=60) as response:
        body = response.read().decode()
    assert response.status == 200 and "Residual Lab" in body


def test_shell_served_by_object_on_port_zero(tmp_path):
    manager = JobManager(tmp_path, max_jobs=1)
    with serving({"lab": lambda: LabShell(manager=manager).template()}) as url, \
            urllib.request.urlopen(f"{url}/lab", timeout=60) as response:
        assert response.status == 200 and "Residual Lab" in response.read().decode()


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed")
def test_browser_trains_and_sees_the_decision_boundary(server):
    from playwright.sync_api import sync_playwright

    url = server
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{url}/apps", timeout=60_000)
        page.get_by_text("Residual Lab").first.wait_for(timeout=60_000)
        page.get_by_role("button", name="Train the default model").click()
        page.get_by_text("step 400 / 400").first.wait_for(timeout=400_000)
        page.get_by_text("Decision boundary at step 400").first.wait_for(timeout=30_000)
        assert page.get_by_text("completed").first.is_visible()
        browser.close()
    # the browser may fail to fetch fonts from the closed network; nothing else may error
    assert not [e for e in errors if "ERR_NAME_NOT_RESOLVED" not in e and "Failed to load resource" not in e]
