"""A run trained inside this process, in a daemon thread: the job the pages and notebooks start.

The UI thread controls it (pause, single steps, resume, stop) and polls its snapshot slots; the training thread
checks the controls after every step. Both sides take the job's lock, so a click never meets half a change.
Snapshots are built beside training (:mod:`lab.snapshots.shadow`): the training thread copies the model's tensors when
one is due and trains on while a builder thread makes the snapshot and fills its slot.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from lab.config import ExperimentConfig
from lab.data.toy2d import ToyData
from lab.jobs.job import InProcessJob, PauseAware
from lab.jobs.notes import NotedRun
from lab.runfolder.layout import RunState
from lab.runs.store import Run
from lab.snapshots.publish import DiskSink, Publisher
from lab.train.core import Callback, TrainerView
from lab.train.loader import LoaderData
from lab.train.resume import ResumePlan
from lab.train.runner import train_and_evaluate


class _Control(Callback):
    """The job's hands inside the training loop: stop, pause and single steps, checked after every step."""

    def __init__(self, job: ThreadJob) -> None:
        self.job = job

    def on_step_end(self, trainer: TrainerView, loss: float) -> None:
        job = self.job

        def status(state: str, message: str) -> None:
            job.run.write_status(state, message, step=trainer.step, epoch=trainer.epoch,
                                 total_steps=trainer.total_steps, metrics=trainer.last_eval)

        def paused() -> None:
            job.publisher.publish(trainer, force=True)  # the paused snapshot is exactly the paused model
            status(RunState.PAUSED, f"paused at step {trainer.step}")

        if job._between_steps(stepped=True, paused=paused,
                              resumed=lambda: status(RunState.RUNNING, f"resumed at step {trainer.step}")):
            trainer.should_stop = True


class ThreadJob(InProcessJob):
    """Train a config inside this process, in a daemon thread, recording into ``run``.

    Args:
        cfg: the experiment.
        run: its folder.
        cadence: per snapshot kind, ``(every_n_steps, every_t_seconds)`` (default: node maps every 10 steps,
            layer similarity every 2 s).
        on_demand: kinds built only when due *and* asked for with :meth:`request` (a page asks for the next
            snapshot once it has drawn the last, so no snapshot is computed that nobody will see).
        builders: snapshot builders by kind (default: :func:`lab.snapshots.kinds.default_builders`).
        resume: continue the run (True: from its last checkpoint; a :class:`~lab.train.resume.ResumePlan`).
        disk_every_s: also write each kind's snapshot to ``run/snapshots`` at most this often (0 = never).
        paused: start paused (train only when :meth:`resume` or :meth:`step` is called).
        owner: who started it (a browser session id), for :class:`~lab.jobs.manager.JobManager`.
        progress: show a progress bar (tqdm.auto: a widget in a notebook, text in a terminal).
        callbacks: more subscribers to the training loop, after the job's own (e.g. a
            :class:`~lab.jobs.lockstep.Lockstep` member); each :class:`~lab.jobs.job.PauseAware` one is told when the
            job is paused.
        data: the data, when already built and checked (:func:`~lab.train.runner.checked_data`).
    """

    def __init__(self, cfg: ExperimentConfig, run: Run, *, cadence: dict[str, tuple[int, float]] | None = None,
                 builders: dict[str, Any] | None = None, resume: bool | ResumePlan = False, disk_every_s: float = 2.0,
                 paused: bool = False, owner: str | None = None, progress: bool = False,
                 on_demand: tuple[str, ...] = (), callbacks: tuple[Callback, ...] = (),
                 data: ToyData | LoaderData | None = None) -> None:
        run = run if isinstance(run, NotedRun) else NotedRun(run.path)  # a dropped snapshot kind is noted in its status
        self.cfg, self.run, self.owner, self.progress, self.data = cfg, run, owner, progress, data
        self.callbacks = tuple(callbacks)
        self.resume_from_checkpoint = resume
        self._init_control(paused)
        for cb in self.callbacks:  # a lockstep member: its group must not wait for this job while it is paused
            if isinstance(cb, PauseAware):
                cb.hold_when(self._holding)
        self._slots: dict[str, tuple[int, dict[str, np.ndarray]]] = {}
        self._disk = DiskSink(run, disk_every_s) if disk_every_s else None
        self.publisher = Publisher(self._put, cadence, builders, on_demand=on_demand, beside=True, noted=run.note)
        self._thread = threading.Thread(target=self._main, name=f"lab-job-{run.id}", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> ThreadJob:
        if not self.resume_from_checkpoint:  # a resumed run keeps its status until its own checks have passed
            self.run.write_status(RunState.QUEUED, "starting", step=0)
        self._thread.start()
        return self

    def _main(self) -> None:
        try:
            train_and_evaluate(self.cfg, self.run, callbacks=[self.publisher, _Control(self), *self.callbacks],
                               resume=self.resume_from_checkpoint, progress=self.progress, data=self.data)
        except BaseException as err:  # already recorded as "failed" in status.json
            self.error = err
        finally:
            self.publisher.close()

    def request(self, kind: str) -> None:
        self.publisher.request(kind)

    def _put(self, kind: str, payload: dict[str, np.ndarray]) -> None:
        with self._lock:
            version = self._slots.get(kind, (0, None))[0] + 1
            self._slots[kind] = (version, payload)
        self._landed()
        if self._disk is not None:
            self._disk(kind, payload)

    def latest(self, kind: str) -> tuple[int, dict[str, np.ndarray]] | None:
        with self._lock:
            return self._slots.get(kind)

    def kinds(self) -> list[str]:
        """The snapshot kinds published so far."""
        with self._lock:
            return list(self._slots)
