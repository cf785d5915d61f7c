"""What a run's folder says of a training process that ended without finishing it."""

import pytest

from lab.jobs.job import exited_status, record_failure
from lab.runfolder.layout import Checkpoint
from lab.runs.store import RunStore


@pytest.fixture
def store(tmp_path):
    return RunStore(tmp_path)


def test_an_exited_child_says_whether_a_resume_has_a_checkpoint_and_keeps_the_notes(store):
    run = store.create("killed")
    run.write_status("running", "step 0", step=0, total_steps=10, notes=["nodes snapshots are off for this run"])
    status = exited_status(run, -9)
    assert status["state"] == "failed" and status["returncode"] == -9
    assert status["message"] == "process exited with code -9 before finishing; no checkpoint yet"
    assert status["notes"] == ["nodes snapshots are off for this run"] and run.read_status() == status
    later = store.create("later")
    later.write_status("running", "step 5", step=5)
    later.checkpoint_path(Checkpoint.LAST).write_bytes(b"")
    assert exited_status(later, 1, stopped="ended by SIGTERM")["message"] == (
        "stopped on request: ended by SIGTERM; resume continues from the last checkpoint")


def test_a_failure_no_trainer_recorded_is_recorded_with_the_error_in_the_run_and_its_members(store):
    folder, member, done = store.create("sweep"), store.create("m0"), store.create("m1")
    for run in (folder, member):
        run.write_status("queued", "starting")
    done.write_status("completed", "completed 10 steps")
    try:
        raise ValueError("unknown model 'mine'")
    except ValueError as err:
        status = record_failure(folder, err, [member, done])
    assert status["state"] == "failed" and status["message"] == "ValueError: unknown model 'mine'; no checkpoint yet"
    assert "Traceback" in status["traceback"] and [m["state"] for m in status["members"]] == ["failed", "completed"]
    assert member.read_status()["message"] == status["message"] and done.read_status()["state"] == "completed"
    assert record_failure(folder, RuntimeError("later"), [member, done]) == status, "an ended run keeps its end"
