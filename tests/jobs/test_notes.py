"""A run's notes: carried by every status written after the note, whoever writes it."""

from lab.jobs.notes import NotedRun
from lab.runs.store import Run, RunStore


def test_every_status_written_after_a_note_carries_it(tmp_path):
    run = NotedRun(RunStore(tmp_path).create("noted").path)
    assert "notes" not in run.write_status("running", "step 1")
    run.note("nodes snapshots are off for this run")
    run.note("nodes snapshots are off for this run")  # once
    for state in ("running", "paused", "completed"):  # a heartbeat, a pause, the end
        run.write_status(state, state, step=3)
        assert Run(run.path).read_status()["notes"] == ["nodes snapshots are off for this run"]
