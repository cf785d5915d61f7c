"""Jobs: one interface for a run in this process (:class:`ThreadJob`) or elsewhere (:mod:`lab.jobs.process`).

Views never receive pushes. A job keeps, per snapshot kind, a lock-protected latest ``(version, payload)`` slot
that views poll from their own thread; versions only grow, so a view redraws exactly when the version changed.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from lab.config import ExperimentConfig
from lab.jobs.runner import train_and_evaluate
from lab.jobs.snapshots import DiskSink, Publisher
from lab.jobs.store import FINISHED, Run
from lab.train.trainer import Callback, Trainer


class Job:
    """What pages and notebooks hold: control, status, snapshots, metrics. Subclasses fill in the mechanics."""

    run: Run
    owner: str | None = None
    keep: bool = False  # a kept job survives its owner's browser session

    def start(self) -> Job:
        raise NotImplementedError

    def pause(self) -> None:
        raise NotImplementedError

    def resume(self) -> None:
        raise NotImplementedError

    def stop(self, timeout: float = 5.0) -> None:
        raise NotImplementedError

    def latest(self, kind: str) -> tuple[int, dict[str, np.ndarray]] | None:
        """``(version, payload)`` of the newest snapshot of ``kind``, or None before the first."""
        raise NotImplementedError

    def is_alive(self) -> bool:
        return self.status().get("state") not in (*FINISHED, "unknown")

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


class _Control(Callback):
    """The job's hands inside the training loop: stop, pause and single steps, checked after every step."""

    def __init__(self, job: ThreadJob) -> None:
        self.job = job

    def on_step_end(self, trainer: Trainer, loss: float) -> None:
        job = self.job
        if job._step_budget is not None:
            job._step_budget -= 1
            if job._step_budget <= 0:
                job._step_budget = None
                job._resume.clear()
        if not job._resume.is_set() and not job._stop.is_set():
            job.publisher.publish(trainer, force=True)  # the paused frame is exactly the paused model
            job.run.write_status("paused", f"paused at step {trainer.step}", step=trainer.step,
                                 epoch=trainer.epoch, total_steps=trainer.total_steps, metrics=trainer.last_eval)
            while not job._resume.wait(0.05) and not job._stop.is_set():
                pass
            if not job._stop.is_set():
                job.run.write_status("running", f"resumed at step {trainer.step}", step=trainer.step,
                                     epoch=trainer.epoch, total_steps=trainer.total_steps,
                                     metrics=trainer.last_eval)
        if job._stop.is_set():
            trainer.should_stop = True


class ThreadJob(Job):
    """Train a config inside this process, in a daemon thread, recording into ``run``.

    Args:
        cfg: the experiment.
        run: its folder.
        cadence: per snapshot kind, ``(every_n_steps, every_t_seconds)`` (default: node maps every 10 steps,
            layer similarity every 2 s).
        builders: snapshot builders by kind (default :data:`lab.jobs.snapshots.BUILDERS`).
        resume: continue from the run's last checkpoint.
        disk_every_s: also write each kind's snapshot to ``run/snapshots`` at most this often (0 = never).
        paused: start paused (train only when :meth:`resume` or :meth:`step` is called).
        owner: who started it (a browser session id), for :class:`~lab.jobs.manager.JobManager`.
        progress: show a progress bar (tqdm.auto: a widget in a notebook, text in a terminal).
    """

    def __init__(self, cfg: ExperimentConfig, run: Run, *, cadence: dict[str, tuple[int, float]] | None = None,
                 builders: dict[str, Any] | None = None, resume: bool = False, disk_every_s: float = 2.0,
                 paused: bool = False, owner: str | None = None, progress: bool = False) -> None:
        self.cfg, self.run, self.owner, self.progress = cfg, run, owner, progress
        self.resume_from_checkpoint = resume
        self._lock = threading.Lock()
        self._slots: dict[str, tuple[int, dict[str, np.ndarray]]] = {}
        self._disk = DiskSink(run, disk_every_s) if disk_every_s else None
        self.publisher = Publisher(self._put, cadence, builders)
        self._stop = threading.Event()
        self._resume = threading.Event()
        if not paused:
            self._resume.set()
        self._step_budget: int | None = None
        self._thread = threading.Thread(target=self._main, name=f"lab-job-{run.id}", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> ThreadJob:
        self.run.write_status("queued", "starting", step=0)
        self._thread.start()
        return self

    def _main(self) -> None:
        try:
            train_and_evaluate(self.cfg, self.run, callbacks=[self.publisher, _Control(self)],
                               resume=self.resume_from_checkpoint, progress=self.progress)
        except BaseException as err:  # already recorded as "failed" in status.json
            self.error = err

    def pause(self) -> None:
        self._resume.clear()

    def resume(self) -> None:
        self._step_budget = None
        self._resume.set()

    def step(self, n: int = 1) -> None:
        """Train ``n`` more steps, then pause again."""
        self._step_budget = n
        self._resume.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the loop to stop after the current step; waits up to ``timeout`` s for the thread to end."""
        self._stop.set()
        self._resume.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _put(self, kind: str, payload: dict[str, np.ndarray]) -> None:
        with self._lock:
            version = self._slots.get(kind, (0, None))[0] + 1
            self._slots[kind] = (version, payload)
        if self._disk is not None:
            self._disk(kind, payload)

    def latest(self, kind: str) -> tuple[int, dict[str, np.ndarray]] | None:
        with self._lock:
            return self._slots.get(kind)
