import contextlib
import threading
import time

import psutil
import pytest

from lab.jobs.manager import JobManager, ManagerBusy
from lab.train.resume import ResumeRefused
from tests.jobs.helpers import tiny, wait_for


def test_bound_on_concurrent_jobs_and_owner_release(tmp_path):
    manager = JobManager(tmp_path, max_jobs=2)
    a = manager.start_thread(tiny(), owner="s1")
    b = manager.start_thread(tiny(), owner="s2")
    with pytest.raises(ManagerBusy, match="busy: 2 of 2 training jobs are running") as busy:
        manager.start_thread(tiny())
    assert a.run.id in str(busy.value) and b.run.id in str(busy.value)  # the user can find them
    b.keep = True
    manager.release_owner("s1")  # asks, without waiting (it runs on the server's event loop)
    manager.release_owner("s2")
    assert a.stopping or not a.is_alive()
    assert wait_for(lambda: not a.is_alive()) and b.is_alive()
    c = manager.start_thread(tiny(), paused=True)  # a slot freed up
    manager.shutdown()
    assert not b.is_alive() and not c.is_alive()
    assert manager.active() == []


def test_a_paused_job_holds_no_slot_and_is_reported_as_paused(tmp_path):
    manager = JobManager(tmp_path, max_jobs=1)
    paused = manager.start_thread(tiny())
    paused.pause()
    assert wait_for(lambda: paused.status()["state"] == "paused")
    running = manager.start_thread(tiny())  # the paused job left its slot
    assert manager.training() == [running] and set(manager.active()) == {paused, running}
    with pytest.raises(ManagerBusy) as busy:
        paused.resume()  # its slot is taken now: it says so instead of oversubscribing the machine
    message = str(busy.value)
    assert f"running ({running.run.id})" in message and f"paused, holding no slot: {paused.run.id}" in message
    with pytest.raises(ManagerBusy):
        paused.step(1)
    assert paused.is_paused() and paused.status()["state"] == "paused"
    running.stop()
    paused.resume()  # a free slot again
    assert wait_for(lambda: paused.status()["state"] == "running")
    manager.shutdown()


def test_resume_through_the_manager_is_refused_before_any_job_without_a_checkpoint(tmp_path):
    manager = JobManager(tmp_path, max_jobs=1)
    job = manager.start_thread(tiny(**{"train.max_steps": 40}))
    assert job.wait(60)["state"] == "completed"
    job.run.checkpoint_path("last").unlink()
    status = (job.run.path / "status.json").read_bytes()
    with pytest.raises(ResumeRefused, match="--checkpoint best"):
        manager.resume(job.run.id)
    assert manager.active() == [] and (job.run.path / "status.json").read_bytes() == status


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
    assert not [c for c in psutil.Process().children(recursive=True) if c.is_running()
                and c.status() != psutil.STATUS_ZOMBIE and not shared_by_the_process(c)]
    assert proc_job.status()["state"] == "stopped"


def shared_by_the_process(child: psutil.Process) -> bool:
    """multiprocessing's fork server and resource tracker, which a child job (here, or in an earlier test of this
    process) started: they serve every later child job and end with this process, not with a manager."""
    with contextlib.suppress(psutil.Error):
        command = " ".join(child.cmdline())
        return "multiprocessing.forkserver" in command or "multiprocessing.resource_tracker" in command
    return False


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


def test_a_page_job_whose_data_cannot_train_leaves_no_run_folder(tmp_path):
    manager = JobManager(tmp_path, max_jobs=1)
    with pytest.raises(ValueError, match="leaves no test samples"):
        manager.start_thread(tiny(**{"data.train_fraction": 1.0}))
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
    assert manager.active() == []


@pytest.mark.parametrize("processes", [False, True], ids=["threads", "child process"])
def test_runs_in_lockstep_hold_one_slot_and_stay_at_one_step(tmp_path, processes):
    manager = JobManager(tmp_path, max_jobs=1, processes=processes)
    jobs = manager.start_lockstep([tiny(**{"model.alpha_min": a}) for a in (1.0, 0.8, 0.6)], names=["a", "b", "c"],
                                  paused=True)
    assert [j.run.id.rsplit("-", 1)[-1] for j in jobs] == ["a", "b", "c"]
    for job in jobs:  # each asks for a slot again: its group's others do not count against it
        job.step(5)
    assert wait_for(lambda: all(j.status().get("state") == "paused" and j.status()["step"] == 5 for j in jobs))
    for job in jobs:
        job.resume()
    assert wait_for(lambda: all(j.status()["state"] == "running" for j in jobs)) and len(manager.training()) == 3
    with pytest.raises(ManagerBusy, match="busy"):
        manager.start_thread(tiny())  # the group holds the one slot
    manager.shutdown()
    assert all(not j.is_alive() for j in jobs)


def test_a_lockstep_group_that_cannot_train_starts_nothing(tmp_path):
    manager = JobManager(tmp_path, max_jobs=2)
    with pytest.raises(ValueError):
        manager.start_lockstep([tiny(), tiny(**{"data.train_fraction": 1.0})])
    assert manager.active() == [] and list(tmp_path.iterdir()) == []
