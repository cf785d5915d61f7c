"""A page's work in a bounded child: its value comes back; a memory bomb, an endless task, a crash and a Cancel end
it with the bound or reason named, and the server (this process) neither grows nor waits."""

import resource

import pytest

from lab.jobs.bounded import BoundedTask, Bounds, ServerBusy, TaskFailed
from tests.jobs import bounded_work


def _ended(task: BoundedTask) -> BoundedTask:
    assert task.wait(120), "the task did not end"
    return task


def test_the_value_and_the_progress_come_back():
    task = _ended(BoundedTask(bounded_work.add, 2, 3, bounds=Bounds(seconds=60)).start())
    assert task.result() == 5
    assert task.progress == (3, 3)


def test_a_memory_bomb_is_stopped_at_the_memory_bound_in_the_child_and_the_server_does_not_grow():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    task = _ended(BoundedTask(bounded_work.allocate, 8.0, bounds=Bounds(memory_mb=256, seconds=120)).start())
    with pytest.raises(TaskFailed, match="memory bound of 256 MB") as err:
        task.result()
    assert err.value.reason == "memory"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024
    small = _ended(BoundedTask(bounded_work.allocate, 0.05, bounds=Bounds(memory_mb=256, seconds=120)).start())
    assert small.result() == int(0.05 * 2**30 / 4)  # under the bound, the same work runs


def test_an_endless_task_is_stopped_at_the_time_bound():
    task = _ended(BoundedTask(bounded_work.sleep, 3600, bounds=Bounds(seconds=1)).start())
    with pytest.raises(TaskFailed, match="time bound of 1 s") as err:
        task.result()
    assert err.value.reason == "time"


def test_cancel_kills_the_child_and_frees_the_servers_slot():
    bounds = Bounds(seconds=600, jobs=1)
    first = BoundedTask(bounded_work.sleep, 3600, bounds=bounds).start()
    with pytest.raises(ServerBusy, match="at most 1"):
        BoundedTask(bounded_work.add, 1, 1, bounds=bounds).start()
    assert not first.done()
    first.cancel()
    with pytest.raises(TaskFailed, match="cancelled"):
        _ended(first).result()
    assert _ended(BoundedTask(bounded_work.add, 1, 1, bounds=bounds).start()).result() == 2


def test_an_error_comes_back_as_its_type_and_a_bounded_message_and_a_crash_as_its_signal():
    with pytest.raises(TaskFailed, match=r"^ValueError: x+ … \(8000 more\)$") as err:
        _ended(BoundedTask(bounded_work.fail, 10_000 - len("ValueError: "), bounds=Bounds(seconds=60)).start()).result()
    assert len(str(err.value)) < 2100
    with pytest.raises(TaskFailed, match="signal SIGSEGV"):
        _ended(BoundedTask(bounded_work.crash, bounds=Bounds(seconds=60)).start()).result()


@pytest.mark.parametrize(("name", "value", "message"), [("LAB_PAGE_MEMORY_MB", "lots", "is not a number"),
                                                        ("LAB_PAGE_SECONDS", "0", "out of range"),
                                                        ("LAB_PAGE_JOBS", "1000", "out of range")])
def test_bounds_from_the_environment_are_checked(monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        Bounds.from_env()
    monkeypatch.delenv(name)
    assert Bounds.from_env() == Bounds()
