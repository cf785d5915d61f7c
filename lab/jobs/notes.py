"""Notes on a run: what its training went on without, carried by every status it writes from then on.

A snapshot kind whose builder raised (a plugin model without ``forward_intermediates`` cannot be drawn as node
maps) is dropped for the run, and training goes on (:class:`~lab.snapshots.publish.Publisher`); the run's status says so
in its ``notes``, a list of sentences, which the page shows under the status line. A status is rewritten whole, by
the recorder's heartbeats (one a second while it trains), a pause and the end of training alike: a
:class:`NotedRun` adds its notes to each of them, so a note is in every status from the next one written to the
run's final one. A page's run trains on a :class:`NotedRun` in its child process (:mod:`lab.jobs.child`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lab.runfolder.layout import RunState
from lab.runs.store import Run


@dataclass(frozen=True)
class NotedRun(Run):
    """A run folder whose status writes carry its notes (status.json's ``notes``), in the order they were made.

    Attributes:
        notes: the notes so far; :meth:`note` adds one (from any thread: the next status written carries it).
    """

    notes: list[str] = field(default_factory=list, compare=False)

    def note(self, text: str) -> None:
        """Add ``text`` to the notes, once."""
        if text not in self.notes:
            self.notes.append(text)

    def write_status(self, state: RunState | str, message: str = "", **fields: Any) -> dict[str, Any]:
        if self.notes:
            fields = {"notes": list(self.notes), **fields}
        return super().write_status(state, message, **fields)
