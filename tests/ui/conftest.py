"""Fixtures for the page tests: a job manager with its own runs folder, shut down afterwards."""

import pytest

from lab.jobs.manager import JobManager


@pytest.fixture
def manager(tmp_path):
    """One job at a time, writing under the test's own folder."""
    m = JobManager(tmp_path / "runs", max_jobs=1)
    yield m
    m.shutdown()
