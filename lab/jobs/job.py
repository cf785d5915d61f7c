"""The job interface: what pages, notebooks and the command line hold for a run, wherever it trains.

A job is a run folder (:class:`~lab.runs.store.Run`) plus control. Views never receive pushes: a job keeps, per
snapshot kind, a latest ``(version, payload)`` slot that views poll from their own thread; versions only grow,
so a view redraws exactly when the version changed. Implementations: :class:`~lab.jobs.thread.ThreadJob` (a
run in this process) and :mod:`lab.jobs.process` (a child process, or a run something else writes).
"""

from __future__ import annotations

import abc
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from lab.runfolder.layout import Checkpoint, RunState
from lab.runfolder.lock import remove_stale
from lab.runs.store import FINISHED, Run, error_text


def _always(job: Job) -> None:
    """The admission of a job no manager bounds: always granted."""


class Job:
    """Control, status, snapshots and metrics of one run. Subclasses fill in the mechanics.

    Attributes:
        admission: called with the job before a paused job trains again; raises when no slot is free (set by
            :class:`~lab.jobs.manager.JobManager`).
    """

    run: Run
    owner: str | None = None
    keep: bool = False  # a kept job survives its owner's browser session
    group: object | None = None  # jobs of one lockstep group hold one slot of their manager together
    admission: Callable[[Job], None] = staticmethod(_always)
    _listeners: tuple[Callable[[], None], ...] = ()

    def start(self) -> Job:
        raise NotImplementedError

    def pause(self) -> None:
        raise NotImplementedError

    def resume(self) -> None:
        raise NotImplementedError

    def step(self, n: int = 1) -> None:
        """Train ``n`` more steps, then pause (jobs in this process only)."""
        raise NotImplementedError(f"{type(self).__name__} cannot train single steps")

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the job to stop after its current step; wait at most ``timeout`` seconds for it to end (0: return at
        once; the job still ends)."""
        raise NotImplementedError

    @property
    def stopping(self) -> bool:
        """Whether the job was asked to stop and is ending (it then holds no training slot of its manager)."""
        return False

    def request(self, kind: str) -> None:
        """Ask for one more snapshot of an on-demand ``kind`` (a no-op for jobs that publish on a fixed cadence)."""

    def latest(self, kind: str) -> tuple[int, dict[str, np.ndarray]] | None:
        """``(version, payload)`` of the newest snapshot of ``kind``, or None before the first."""
        raise NotImplementedError

    def listen(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` each time a new snapshot lands in a slot, from the thread that put it there (with no
        lock of the job held): a page draws a snapshot as soon as it is made instead of at its next poll."""
        self._listeners = (*self._listeners, callback)

    def _landed(self) -> None:
        """A new snapshot is in its slot: tell the listeners."""
        for callback in self._listeners:
            callback()

    def is_alive(self) -> bool:
        return self.status().get("state") not in (*FINISHED, "unknown")

    def is_paused(self) -> bool:
        """Whether the job is alive but paused (it then holds no training slot of its manager)."""
        return self.status().get("state") == RunState.PAUSED

    def status(self) -> dict[str, Any]:
        """The run's status.json (state, message, step, epoch, total_steps, metrics, heartbeat)."""
        return self.run.read_status()

    def wait(self, timeout: float | None = None, poll: float = 0.05) -> dict[str, Any]:
        """Block until the job has finished (or ``timeout``); returns the status."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.is_alive() and (deadline is None or time.monotonic() < deadline):
            time.sleep(poll)
        return self.status()

    def metrics_since(self, cursor: int = 0) -> tuple[list[dict[str, Any]], int]:
        """New metric records since ``cursor`` (a byte offset; start with 0) and the next cursor."""
        return self.run.read_metrics(cursor)


def resume_note(run: Run) -> str:
    """What a resume of ``run``, ended before finishing, starts from: its last checkpoint, or nothing yet."""
    return ("resume continues from the last checkpoint" if run.checkpoint_path(Checkpoint.LAST).exists()
            else "no checkpoint yet")


def exited_status(run: Run, code: int | None, members: Sequence[Run] = (), *,
                  stopped: str | None = None) -> dict[str, Any]:
    """The status of ``run`` trained by a child process that exited with ``code`` (None: still running). A child that
    ended without bringing its run to a final state (killed, out of memory, a crash) is recorded ``failed`` with its
    exit code, so every reader of the folder sees it, and its lock, which names that process, is removed; the run's
    last checkpoint stays for a resume (the message says whether there is one). When the user had asked it to stop,
    it is recorded ``stopped`` instead, ``stopped`` saying how it was ended. ``members``: the member runs of a sweep
    folder ``run``, each recorded the same way, and named so in the sweep's status."""
    status = run.read_status()
    if code is None or status.get("state") in FINISHED:
        return status
    remove_stale(run.path)  # the lock names the process that is gone
    if stopped is not None:
        return _ended(run, status, RunState.STOPPED, f"stopped on request: {stopped}", members, returncode=code)
    return _ended(run, status, RunState.FAILED, f"process exited with code {code} before finishing", members,
                  returncode=code)


def record_failure(run: Run, err: BaseException, members: Sequence[Run] = ()) -> dict[str, Any]:
    """Record ``run`` ``failed`` with ``err`` (:func:`error_text`, and its traceback) unless it has ended already:
    what a training process writes of an error that no trainer recorded (a config or a job it could not even make),
    so the folder says why the run failed rather than only that its process exited. ``members``: the member runs of a
    sweep folder ``run``, recorded the same way."""
    status = run.read_status()
    if status.get("state") in FINISHED:
        return status
    return _ended(run, status, RunState.FAILED, error_text(err), members,
                  traceback="".join(traceback.format_exception(err, limit=20)))


def _ended(run: Run, status: dict[str, Any], state: RunState, why: str, members: Sequence[Run],
           **fields: Any) -> dict[str, Any]:
    """Write ``run``'s final ``state``: ``why``, then what a resume starts from; its step, epoch and length and any
    notes stay (:class:`~lab.jobs.notes.NotedRun`); each member of a sweep folder is recorded the same way unless
    it has ended, and named so in the folder's status."""
    if members:
        entries = status.get("members") or [{"run": m.id} for m in members]
        fields["members"] = [{**entry, "state": _member_ended(m, state, why, **fields)["state"]}
                             for entry, m in zip(entries, members, strict=True)]
    if status.get("notes"):
        fields["notes"] = status["notes"]
    return run.write_status(state, f"{why}; {resume_note(run)}", step=status.get("step", 0),
                            epoch=status.get("epoch", 0), total_steps=status.get("total_steps"), **fields)


def _member_ended(run: Run, state: RunState, why: str, **fields: Any) -> dict[str, Any]:
    status = run.read_status()
    if status.get("state") in FINISHED:
        return status
    remove_stale(run.path)
    return _ended(run, status, state, why, (), **fields)


class PauseAware(abc.ABC):
    """A training callback that must know when the job training it is paused (a
    :class:`~lab.jobs.lockstep.Lockstep` member: its group does not wait for a paused job). An in-process job
    hands every such callback it is given its "am I paused" test before training starts."""

    @abc.abstractmethod
    def hold_when(self, paused: Callable[[], bool]) -> None:
        """Remember ``paused()``, true while the job is paused (called from any thread)."""


class InProcessJob(Job):
    """A job whose training loop runs in a thread of this process (``self._thread``, made by the subclass): pause,
    resume, single steps and stop are shared state under one lock, which the training thread reads between steps
    (:meth:`_between_steps`) and subclasses also use for their snapshot slots."""

    _thread: threading.Thread

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the loop to stop after the current step (an ensemble's members then evaluate and save their
        checkpoints); waits up to ``timeout`` s for the thread to end."""
        self._stop.set()
        self._resume.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set() and self._thread.is_alive()

    def is_paused(self) -> bool:
        """Paused (or asked to pause) and not stopping: the job trains no more steps until :meth:`resume`."""
        return self._thread.is_alive() and not self._resume.is_set() and not self._stop.is_set()

    def _init_control(self, paused: bool) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._resume = threading.Event()
        if not paused:
            self._resume.set()
        self._step_budget: int | None = None

    def pause(self) -> None:
        with self._lock:
            self._resume.clear()

    def resume(self) -> None:
        """Go on training. Raises :class:`~lab.jobs.manager.ManagerBusy` when the job's manager has no free slot (a
        paused job holds none)."""
        if self.is_paused():
            self.admission(self)
        with self._lock:
            self._step_budget = None
            self._resume.set()

    def step(self, n: int = 1) -> None:
        """Train ``n`` more steps, then pause again (needs a free slot, as :meth:`resume`)."""
        if self.is_paused():
            self.admission(self)
        with self._lock:
            self._step_budget = n
            self._resume.set()

    def _holding(self) -> bool:
        """Whether the training thread is to hold (paused, or asked to pause): what :class:`PauseAware` callbacks
        are told."""
        return not self._resume.is_set()

    def _count_step(self) -> None:
        """A step was trained: use up one of :meth:`step`'s budget, pausing when it is spent (training thread)."""
        with self._lock:
            if self._step_budget is not None:
                self._step_budget -= 1
                if self._step_budget <= 0:
                    self._step_budget = None
                    self._resume.clear()

    def _between_steps(self, *, stepped: bool, paused: Callable[[], None], resumed: Callable[[], None]) -> bool:
        """The training thread's pause point: count a trained step (``stepped``; not before the first), and while
        the job is paused, call ``paused()`` (publish the paused snapshot, write the paused status), wait for
        :meth:`resume`, :meth:`step` or :meth:`stop`, then call ``resumed()`` unless stopping.

        Returns:
            Whether the job was asked to stop (the loop then stops after this step).
        """
        if stepped:
            self._count_step()
        if not self._resume.is_set() and not self._stop.is_set():
            paused()
            while not self._resume.wait(0.05) and not self._stop.is_set():
                pass
            if not self._stop.is_set():
                resumed()
        return self._stop.is_set()
