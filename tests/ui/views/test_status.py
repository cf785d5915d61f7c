"""A job's status on a page: the run's notes under its status line, shown as the text they are."""

from lab.ui.views.status import JobStatus
from tests.ui.driving import shown


def test_a_runs_notes_show_under_its_status_line_as_text_while_it_has_some():
    status = JobStatus()
    note = "nodes snapshots are off for this run: their builder raised AttributeError: no *forward_intermediates*"
    status.show({"state": "running", "step": 3, "total_steps": 10, "notes": [note, "<b>second</b>"]})
    assert status.notes.visible and status.notes.alert_type == "warning" and not status.alert.visible
    text = shown(status.notes)
    assert note in text and "<b>second</b>" in text, "markup in a note is shown, not applied"
    status.show({"state": "completed", "step": 10, "total_steps": 10})
    assert not status.notes.visible
    status.show({"state": "running", "notes": "not a list"})  # a status.json written by anyone
    assert not status.notes.visible
