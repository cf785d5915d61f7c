"""Fixtures for the page tests: a job manager with its own runs folder, shut down afterwards; the lab served for
real, with its own runs folder, for the browser tests."""

import logging

import pytest

from lab.jobs.bounded import cancel_all
from lab.jobs.manager import JobManager
from lab.ui.serve import serving_lab


@pytest.fixture(autouse=True)
def _no_analysis_left():
    """Each test's pages' analyses (previews in bounded children) end with it: they hold the server's slots."""
    yield
    cancel_all()


@pytest.fixture
def manager(tmp_path):
    """One job at a time, writing under the test's own folder."""
    m = JobManager(tmp_path / "runs", max_jobs=1)
    yield m
    m.shutdown()


CLIENT_GONE = ("WebSocketClosedError", "StreamClosedError")


@pytest.fixture
def server(tmp_path, monkeypatch, caplog):
    """The lab's real app (lab/ui/app.py, what apps/main.py runs) served by pn.serve on a free port of 127.0.0.1,
    with its own runs folder.

    On teardown the server's log must hold no Bokeh validation message (``E-1xxx`` errors, ``W-1xxx`` warnings)
    and no error (an exception in a callback is logged, not raised: the page would just stop updating).
    """
    caplog.set_level(logging.WARNING, logger="bokeh")
    monkeypatch.setenv("LAB_RUNS_DIR", str(tmp_path / "runs"))
    with serving_lab(tmp_path / "runs", max_jobs=2) as url:
        yield url
    validation = [r.getMessage() for r in caplog.records if r.name.startswith("bokeh.core.validation")]
    assert not validation, validation
    # a write to a browser that has already closed is the client leaving, not a failure of the page
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR
              and not any(gone in r.getMessage() + (r.exc_text or "") for gone in CLIENT_GONE)]
    assert not errors, errors
