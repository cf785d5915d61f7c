"""The process-wide job manager: a bound on concurrent jobs, ownership by browser session, clean shutdown."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lab.config import ExperimentConfig
from lab.jobs.bounded import cancel_all
from lab.jobs.child import ChildJob, warm_up
from lab.jobs.job import Job
from lab.jobs.lockstep import Lockstep
from lab.jobs.process import ProcessJob, attach
from lab.jobs.sweep_job import SweepJob, group_plan, plan_from_config
from lab.jobs.thread import ThreadJob
from lab.runs.store import RunStore
from lab.sweeps import SweepPlan, create_sweep
from lab.train.resume import check_run, plan_resume
from lab.train.runner import checked_data, resolved


class ManagerBusy(RuntimeError):
    """All job slots are taken; the message says how many and what to do."""


def slots(jobs: Sequence[Job]) -> int:
    """The slots ``jobs`` hold: one per job, one per lockstep group (:meth:`JobManager.start_lockstep`)."""
    return len({id(j) if j.group is None else id(j.group) for j in jobs})


def rivals(jobs: Sequence[Job], job: Job) -> list[Job]:
    """Those of ``jobs`` that take slots from ``job``: every other one, except its own lockstep group's."""
    return [j for j in jobs if j is not job and (j.group is None or j.group is not job.group)]


class JobManager:
    """Start and track jobs; at most ``max_jobs`` train at once (extra requests get :class:`ManagerBusy`). A paused job
    holds no slot: resuming it asks for one again (:meth:`Job.resume` raises :class:`ManagerBusy` when none is free).
    Runs trained in lockstep hold one slot together: they train one step at a time, each waiting for the others.

    Args:
        runs_dir: the runs folder (default ``$LAB_RUNS_DIR`` or ``./runs``); every job writes only there.
        max_jobs: concurrent running jobs (threads and processes together).
        processes: :meth:`start_thread`'s runs of the tensor engine, :meth:`start_lockstep`'s groups and
            :meth:`start_sweep`'s ensembles train in child processes (:class:`~lab.jobs.child.ChildJob`), apart from
            the server's sessions, rather than in its threads.
    """

    def __init__(self, runs_dir: str | Path | None = None, max_jobs: int = 2, processes: bool = False) -> None:
        if max_jobs < 1:
            raise ValueError(f"max_jobs must be >= 1; got {max_jobs}")
        self.store = RunStore(runs_dir)
        self.max_jobs, self.processes = max_jobs, processes
        if processes:
            warm_up()
        self._jobs: list[Job] = []
        self._lock = threading.Lock()

    def active(self) -> list[Job]:
        """Jobs still running (or paused)."""
        with self._lock:
            self._jobs = [j for j in self._jobs if j.is_alive()]
            return list(self._jobs)

    def training(self) -> list[Job]:
        """Jobs that hold a slot: alive, not paused and not stopping (a job asked to stop ends within its grace
        period: a page's Reset then Start does not wait for it)."""
        return [j for j in self.active() if not j.is_paused() and not j.stopping]

    def _admit(self, job: Job) -> Job:
        with self._lock:
            self._jobs = [j for j in self._jobs if j.is_alive()]
            if slots(rivals([j for j in self._jobs if not j.is_paused() and not j.stopping], job)) >= self.max_jobs:
                raise ManagerBusy(self._busy_message(self._jobs))
            self._jobs.append(job)
            job.admission = self._readmit
        try:
            return job.start()
        except BaseException:
            with self._lock:
                self._jobs.remove(job)
            raise

    def _readmit(self, job: Job) -> None:
        """A paused job asks to train again: granted while fewer than ``max_jobs`` others train."""
        if slots(rivals(self.training(), job)) >= self.max_jobs:
            raise ManagerBusy(self._busy_message(self.active()))

    def start_thread(self, cfg: ExperimentConfig, *, owner: str | None = None, name: str | None = None,
                     **job_kwargs) -> ThreadJob | ChildJob:
        """Train ``cfg`` in a thread of this process (toy models), or, for a manager of ``processes``, a run of the
        tensor engine in a child process (its builders and callbacks must then pickle); see :class:`ThreadJob` for
        ``job_kwargs``.

        Raises:
            ManagerBusy: no free slot. ConfigError, ValueError, FileNotFoundError: the data cannot train
                (:func:`~lab.train.runner.checked_data`), found before a run folder is made.
        """
        self._check_room()
        cfg = resolved(cfg)
        data = checked_data(cfg)
        run = self.store.create(name or cfg.name)
        if self.processes and cfg.train.engine == "tensor":
            return self._admit(ChildJob.training(cfg, run, owner=owner, **job_kwargs))
        return self._admit(ThreadJob(cfg, run, owner=owner, data=data, **job_kwargs))

    def start_lockstep(self, cfgs: Sequence[ExperimentConfig], *, names: Sequence[str] | None = None,
                       owner: str | None = None, **job_kwargs) -> list[ThreadJob] | list[ChildJob]:
        """Train ``cfgs`` in threads of this process, or, for a manager of ``processes``, in threads of one child
        process, in lockstep (:class:`~lab.jobs.lockstep.Lockstep`): no run starts step s + 1 before the others
        have finished step s, so a page compares them at the same step. They hold one slot together.

        Args:
            cfgs: the runs' experiments.
            names: their run folders' names (default: each config's name).
            owner: who started them (a browser session id).
            job_kwargs: see :class:`ThreadJob` (``callbacks`` go before each run's lockstep member; in a child
                process, callbacks and builders must be picklable).

        Raises:
            ManagerBusy: no free slot. ConfigError, ValueError, FileNotFoundError: a run's data cannot train; all
                are checked before any run folder is made.
        """
        self._check_room()
        cfgs = [resolved(cfg) for cfg in cfgs]
        datas = [checked_data(cfg) for cfg in cfgs]
        names = list(names) if names is not None else [cfg.name for cfg in cfgs]
        if self.processes:
            jobs = ChildJob.lockstep(cfgs, [self.store.create(name) for name in names], owner=owner, **job_kwargs)
            try:
                return [self._admit(job) for job in jobs]
            except BaseException:
                for job in jobs:
                    job.stop()
                raise
        group = Lockstep(len(cfgs))
        callbacks = tuple(job_kwargs.pop("callbacks", ()))
        threads: list[ThreadJob] = []
        try:
            for k, (cfg, data, name) in enumerate(zip(cfgs, datas, names, strict=True)):
                job = ThreadJob(cfg, self.store.create(name), owner=owner, data=data,
                                callbacks=(*callbacks, group.member(k)), **job_kwargs)
                job.group = group
                threads.append(self._admit(job))
        except BaseException:
            for k in range(len(threads), len(cfgs)):  # those never started: the others must not wait for them
                group.leave(k)
            for job in threads:
                job.stop()
            raise
        return threads

    def start_sweep(self, sweep: SweepPlan | tuple[ExperimentConfig, Mapping[str, Sequence[Any]]], *,
                    group: int = 0, owner: str | None = None, **job_kwargs) -> SweepJob | ChildJob:
        """Train one ensemble of a sweep in a thread of this process, or, for a manager of ``processes``, in a child
        process; one job against the bound, whatever its size.

        Args:
            sweep: a plan (:func:`~lab.sweeps.plan_sweep`), or a config and the values to sweep, e.g.
                ``(cfg, {"model.alpha_min": [1.0, 0.8, 0.6]})`` (:func:`~lab.jobs.sweep_job.plan_from_config`).
            group: which of the plan's ensemble groups to train (its members alone make the sweep folder).
            owner: who started it (a browser session id).
            job_kwargs: see :class:`~lab.jobs.sweep_job.SweepJob`.
        """
        self._check_room()
        plan = group_plan(sweep if isinstance(sweep, SweepPlan) else plan_from_config(*sweep), group)
        folder, runs = create_sweep(plan, self.store)
        if self.processes:
            return self._admit(ChildJob.sweeping(plan, folder, runs, owner=owner, **job_kwargs))
        return self._admit(SweepJob(plan, folder, runs, owner=owner, **job_kwargs))

    def start_process(self, cfg: ExperimentConfig | None = None, *, command: list[str] | None = None,
                      owner: str | None = None, name: str | None = None) -> ProcessJob:
        """Train ``cfg`` (or run ``command``) in a child process writing to a new run folder."""
        self._check_room()
        run = self.store.create(name or (cfg.name if cfg else "process"))
        return self._admit(ProcessJob(run, command, cfg=cfg, owner=owner))

    def resume(self, run_id: str, *, in_process: bool = True, owner: str | None = None, **job_kwargs) -> Job:
        """Continue a stopped, diverged or killed run from its last checkpoint.

        Raises:
            RunFolderError, ResumeRefused: the run or its checkpoint cannot be used (:mod:`lab.train.resume`);
                FileNotFoundError, ValueError: its data cannot train; all checked before any job starts, so the
                run is left as it was.
        """
        self._check_room()
        run = self.store.open(run_id)
        cfg = check_run(run)
        plan = plan_resume(run)
        data = checked_data(resolved(cfg))  # a moved data set is said here, not recorded as a failed run
        if in_process:
            return self._admit(ThreadJob(cfg, run, resume=plan, owner=owner, data=data, **job_kwargs))
        return self._admit(ProcessJob(run, resume=True, owner=owner))

    def attach(self, run_id_or_path: str | Path) -> Job:
        """Watch a run folder (does not count against the bound: it runs elsewhere)."""
        path = Path(run_id_or_path)
        return attach(path if path.is_dir() else self.store.open(str(run_id_or_path)).path)

    def _check_room(self) -> None:
        if slots(self.training()) >= self.max_jobs:
            raise ManagerBusy(self._busy_message(self.active()))

    def _busy_message(self, jobs: list[Job]) -> str:
        """Which runs hold the slots, and which are paused, so a user can find and stop them (a page in another tab
        or notebook cell)."""
        training = [j for j in jobs if not j.is_paused()]
        paused = [j.run.id for j in jobs if j.is_paused()]
        return (f"busy: {slots(training)} of {self.max_jobs} training jobs are running "
                f"({', '.join(j.run.id for j in training)})"
                + (f"; paused, holding no slot: {', '.join(paused)}" if paused else "")
                + "; stop one or wait for it to finish")

    def release_owner(self, owner: str) -> None:
        """Stop the jobs a closed browser session started, unless the user kept them (without waiting for them: this
        runs on the server's event loop)."""
        for job in self.active():
            if job.owner == owner and not job.keep:
                job.stop(timeout=0)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop every job and wait for threads and child processes to end."""
        for job in self.active():
            job.stop(timeout)
        with self._lock:
            self._jobs.clear()


_MANAGER: JobManager | None = None
_MANAGER_LOCK = threading.Lock()


def settings_from_env() -> dict[str, Any]:
    """The process-wide manager's settings as a server or a notebook takes them from the environment:
    ``LAB_RUNS_DIR`` (runs folder, default ./runs), ``LAB_MAX_JOBS`` (concurrent jobs, default 2) and
    ``LAB_JOB_PROCESSES`` (1, the default: the pages' runs and sweeps train in child processes; 0: in threads)."""
    return {"runs_dir": os.environ.get("LAB_RUNS_DIR"), "max_jobs": int(os.environ.get("LAB_MAX_JOBS", "2")),
            "processes": os.environ.get("LAB_JOB_PROCESSES", "1") != "0"}


def get_manager(**kwargs) -> JobManager:
    """The process-wide manager, created on first use (kwargs apply only then)."""
    global _MANAGER
    with _MANAGER_LOCK:
        if _MANAGER is None:
            _MANAGER = JobManager(**kwargs)
        return _MANAGER


def shutdown_manager() -> None:
    """Shut the process-wide manager down, and cancel the pages' analyses (server exit)."""
    global _MANAGER
    cancel_all()
    with _MANAGER_LOCK:
        if _MANAGER is not None:
            _MANAGER.shutdown()
            _MANAGER = None
