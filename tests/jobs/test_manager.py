import threading
import time

import psutil
import pytest

from lab.jobs.manager import JobManager, ManagerBusy
from tests.jobs.helpers import tiny


def test_bound_on_concurrent_jobs_and_owner_release(tmp_path):
    manager = JobManager(tmp_path, max_jobs=2)
    a = manager.start_thread(tiny(), owner="s1", paused=True)
    b = manager.start_thread(tiny(), owner="s2", paused=True)
    with pytest.raises(ManagerBusy, match="busy: 2 of 2 training jobs are running") as busy:
        manager.start_thread(tiny())
    assert a.run.id in str(busy.value) and b.run.id in str(busy.value)  # the user can find them
    b.keep = True
    manager.release_owner("s1")
    manager.release_owner("s2")
    assert not a.is_alive() and b.is_alive()
    c = manager.start_thread(tiny(), paused=True)  # a slot freed up
    manager.shutdown()
    assert not b.is_alive() and not c.is_alive()
    assert manager.active() == []


@pytest.mark.slow
def test_shutdown_leaves_no_thread_and_no_child_process(tmp_path):
    before_threads = set(threading.enumerate())
    manager = JobManager(tmp_path, max_jobs=2)
    manager.start_thread(tiny())
    proc_job = manager.start_process(tiny(**{"train.max_steps": 100000}))
    deadline = time.monotonic() + 60
    while proc_job.status()["state"] != "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    manager.shutdown()
    assert set(threading.enumerate()) <= before_threads
    children = psutil.Process().children(recursive=True)
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert proc_job.status()["state"] == "stopped"


def test_resume_through_manager(tmp_path):
    manager = JobManager(tmp_path, max_jobs=1)
    job = manager.start_thread(tiny(**{"train.max_steps": 40}), paused=True)
    job.step(20)
    deadline = time.monotonic() + 30
    while not (job.status()["state"] == "paused" and job.status()["step"] == 20) and time.monotonic() < deadline:
        time.sleep(0.02)
    job.stop()
    again = manager.resume(job.run.id)
    assert again.wait(60)["state"] == "completed" and again.status()["step"] == 40
    with pytest.raises(ValueError, match="max_jobs"):
        JobManager(tmp_path, max_jobs=0)
