"""The tests' deadlines grow with the machine's load, or with LAB_TEST_SLOWDOWN, and never fall below an idle one's."""

import os

import pytest

from tests import waiting


@pytest.fixture
def load(monkeypatch):
    """Set the load averages (1, 5 and 15 minutes) the helper reads, on a machine of 2 cores."""
    monkeypatch.delenv(waiting.SLOWDOWN_ENV, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)

    def set_load(*averages: float) -> None:
        monkeypatch.setattr(os, "getloadavg", lambda: averages)

    return set_load


def test_a_busy_machine_gets_its_runnable_processes_per_core_in_time(load):
    load(7.0, 3.0, 1.0)  # the suite's two workers beside five other processes, on two cores
    assert waiting.slowdown() == 3.5 and waiting.scaled(240) == 840
    load(1.0, 6.0, 6.0)  # a burst just ended: the 5-minute average still counts it
    assert waiting.slowdown() == 3.0


def test_an_idle_machine_keeps_the_deadline_as_written(load):
    load(0.2, 0.1, 0.0)
    assert waiting.slowdown() == 1.0 and waiting.scaled(60) == 60


def test_the_environment_variable_decides_over_the_load(load, monkeypatch):
    load(7.0, 7.0, 7.0)
    monkeypatch.setenv(waiting.SLOWDOWN_ENV, "5")
    assert waiting.scaled(10) == 50
    monkeypatch.setenv(waiting.SLOWDOWN_ENV, "0.5")  # never shorter than on an idle machine
    assert waiting.scaled(10) == 10


def test_a_wait_ends_when_its_condition_holds_and_says_whether_it_did(load):
    load(0.0, 0.0, 0.0)
    calls = []
    assert waiting.wait_until(lambda: calls.append(1) or len(calls) == 3, 60, interval=0)
    assert len(calls) == 3  # asked until true, not until the deadline
    assert not waiting.wait_until(lambda: False, 0)
