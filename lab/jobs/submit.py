"""Sweeps sent to a SLURM cluster (or run by submitit's local executor): one job per member, each one ordinary run.

``python -m lab submit CONFIG [overrides; comma lists sweep] --executor slurm --partition P --nodes N
--gpus-per-node G --time H:MM:SS`` plans the sweep as ``lab sweep`` does (every member's config is built and checked
before anything is written), writes the sweep folder into the shared runs folder and submits the members as one
job array through submitit, the library the MAE reference code sends its cluster runs with. A member of any model
trains in its job as ``lab train`` would: data-parallel over the job's nodes × tasks through the same
:class:`~lab.train.distributed.World` as ``torchrun`` (submitit's description of the job is exported as torchrun's
variables), rank 0 writing the member's run folder.

Preemption and time limits: SLURM signals a job (``USR2``, 90 s before its time limit, or when it is preempted).
The member finishes its current step on every process, writes its checkpoint, and only then hands over to
submitit, which requeues the job. A job always continues its run from what the run folder holds, exactly as ``lab
resume`` does: from ``checkpoints/last.pt`` (metric records after its step set aside under ``history/``), or, when
a job was requeued before any checkpoint (a node failure), from step 0 with the earlier attempt kept under
``history/``. Nothing is lost either way.

A submitted sweep folder::

    <runs>/<stamp>-<name>-sweep/
        sweep.json          the plan; per member its run folder, values, state, job id and log files
        jobs/               submitit's folder: each job's submission, result and stdout/stderr logs
        <stamp>-00-.../     one ordinary run folder per member, followed by the Runs page like any other
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.config import ConfigError, config_of_run
from lab.extras import require
from lab.runfolder import layout
from lab.runfolder.layout import Checkpoint, RunState
from lab.runs.catalog import checkpoint_step
from lab.runs.store import FINISHED, Run, RunStore
from lab.sweeps import SweepPlan, create_sweep, write_sweep_file
from lab.train.core import Callback, TrainerView
from lab.train.distributed import close_world, init_world
from lab.train.resume import ResumePlan, plan_resume
from lab.train.runner import train_and_evaluate
from lab.train.stop import StopFile

EXECUTORS = ("slurm", "local")
_TIME = re.compile(r"^(?:(\d+)-)?(\d+):([0-5]\d):([0-5]\d)$")


def parse_time(text: str) -> int:
    """Minutes of a SLURM time limit ``H:MM:SS`` (or ``D-H:MM:SS``), rounded up (SLURM counts whole minutes)."""
    match = _TIME.match(text.strip())
    if match is None:
        raise ConfigError(f"time limit {text!r} is not H:MM:SS (such as 4:00:00) or D-H:MM:SS")
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total < 60:
        raise ConfigError(f"time limit {text!r} is under a minute")
    return -(-total // 60)


@dataclass(frozen=True)
class Resources:
    """What each member's job asks for.

    Attributes:
        executor: ``slurm`` (sbatch) or ``local`` (submitit's local executor: processes on this machine, one node).
        partition: the SLURM partition (default: the cluster's).
        nodes: nodes per job.
        gpus_per_node: GPUs per node (0 trains on CPUs).
        tasks_per_node: training processes per node; default one per GPU (one without GPUs).
        cpus_per_task: CPUs per process (default: the cluster's).
        time: the job's time limit, ``H:MM:SS``; the job is signalled 90 s before it and requeued.
        array_parallelism: at most this many members run at once.
    """

    executor: str = "local"
    partition: str | None = None
    nodes: int = 1
    gpus_per_node: int = 0
    tasks_per_node: int | None = None
    cpus_per_task: int | None = None
    time: str = "1:00:00"
    array_parallelism: int = 64

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ConfigError(f"unknown executor {self.executor!r}; valid: {', '.join(EXECUTORS)}")
        for name in ("nodes", "array_parallelism"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
        for name in ("tasks_per_node", "cpus_per_task"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
        if self.gpus_per_node < 0:
            raise ConfigError("--gpus-per-node must be 0 or more")
        if self.executor == "local" and (self.nodes > 1 or self.partition):
            raise ConfigError("the local executor runs on this one machine: --nodes and --partition are SLURM's")
        parse_time(self.time)

    @property
    def processes(self) -> int:
        """Training processes per job (the data-parallel world size)."""
        return self.nodes * (self.tasks_per_node or max(1, self.gpus_per_node))

    def parameters(self, name: str) -> dict[str, Any]:
        """submitit's parameters for a job called ``name``."""
        params: dict[str, Any] = {
            "name": name, "timeout_min": parse_time(self.time), "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node, "tasks_per_node": self.tasks_per_node or max(1, self.gpus_per_node),
            "slurm_array_parallelism": self.array_parallelism}
        if self.cpus_per_task is not None:
            params["cpus_per_task"] = self.cpus_per_task
        if self.partition:
            params["slurm_partition"] = self.partition
        return params


class Preemption(Callback):
    """The scheduler's warning signal (submitit's, ``USR2`` unless ``SUBMITIT_PREEMPT_SIGNAL`` names another) ends
    the run after its current step, with a checkpoint, instead of submitit requeuing the job from inside the step;
    :meth:`requeue` then hands the signal to submitit's own handler."""

    def __init__(self) -> None:
        self.signum = getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"))
        self._submitit = signal.getsignal(self.signum)
        self.requested = False
        signal.signal(self.signum, self._handler)

    def _handler(self, signum: int, frame: Any) -> None:
        self.requested = True

    def on_step_end(self, trainer: TrainerView, loss: float) -> None:
        if self.requested:
            trainer.should_stop = True  # every process stops at the same step (the loader engine agrees on it)

    def requeue(self) -> None:
        """submitit's handler: on rank 0 it saves this job's callable and requeues the job, then exits.

        The exit code is how submitit's local controller knows to start the job again, so the process ends with it
        at once (:func:`os._exit`, streams flushed) rather than through the interpreter's teardown: by then the run
        folder is complete, and a native thread left joinable at teardown (``terminate called without an active
        exception``) would abort the process and turn the requeue into a job that ended."""
        if not callable(self._submitit):
            return
        try:
            self._submitit(self.signum, None)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            os._exit(code)


def continuation(run: Run) -> bool | ResumePlan:
    """How a job picks up its run: from a readable last checkpoint; from step 0, the earlier attempt set aside,
    when an attempt recorded metrics but left no checkpoint; afresh otherwise."""
    if checkpoint_step(run.checkpoint_path(Checkpoint.LAST)) is not None:
        return True
    if (run.path / layout.METRICS).exists():
        return plan_resume(run, "restart")
    return False


if TYPE_CHECKING:
    import submitit


class SubmittedMember:
    """The callable each member's job runs, on every one of its processes: train the run folder ``run_path``.

    Requeued after a preemption or a time limit, the same callable runs again; the run folder says where to go on
    (:func:`continuation`).
    """

    def __init__(self, run_path: str) -> None:
        self.run_path = run_path

    def checkpoint(self) -> submitit.helpers.DelayedSubmission:
        """What submitit submits again when it requeues the job: this same callable, as submitit's
        ``Checkpointable`` would (the run folder holds the state; submitit, the cluster extra, is imported here, in
        the job, not by every command that imports this module)."""
        return require("submitit").helpers.DelayedSubmission(self)

    def __call__(self) -> dict[str, Any]:
        run = Run(Path(self.run_path))
        cfg = config_of_run(run)
        submitit = require("submitit")
        if submitit.JobEnvironment().num_tasks > 1:  # RANK, WORLD_SIZE, MASTER_ADDR, … as torchrun sets them
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        preemption = Preemption()
        world = init_world(cfg.train.device)
        try:
            status = train_and_evaluate(cfg, run, callbacks=[StopFile(run), preemption], world=world,
                                        resume=continuation(run), progress=False)
        finally:
            close_world(world)
        print(f"{run.id}: {status['state']}: {status['message']}", flush=True)
        if preemption.requested and status["state"] == RunState.STOPPED:
            preemption.requeue()
        return status


@dataclass
class SubmittedSweep:
    """A sweep whose members were submitted: its plan, folder, the members' run folders and their jobs."""

    plan: SweepPlan
    folder: Run
    runs: list[Run]
    jobs: list[submitit.Job]

    def job_records(self) -> list[dict[str, str]]:
        """Per member: its job id and log files (as sweep.json names them)."""
        return [{"job_id": job.job_id, "stdout": str(job.paths.stdout), "stderr": str(job.paths.stderr)}
                for job in self.jobs]

    def wait(self) -> list[dict[str, Any]]:
        """Wait for every job to end; sweep.json then records each member's final state. A member whose job ended
        without finishing its run (killed, out of memory, an error before training) is ``failed`` there, with its
        job id and log; its run folder is left as its job left it.

        Returns:
            Each member's state and message (``state``, ``message``).
        """
        for job in self.jobs:
            job.wait()
        statuses = []
        for run, job, record in zip(self.runs, self.jobs, self.job_records(), strict=True):
            status = run.read_status()
            if status.get("state") not in FINISHED:
                status = {"state": RunState.FAILED, "message": f"job {job.job_id} ended ({job.state}) with the run "
                                                        f"{status.get('state', 'unknown')}; see {record['stderr']}"}
            statuses.append(status)
        write_sweep_file(self.folder, self.plan, self.runs, statuses, self.job_records())
        return statuses


class SubmissionRefused(RuntimeError):
    """The scheduler refused the jobs (sbatch's message included); sweep.json records it."""


def check_resources(plan: SweepPlan, resources: Resources) -> None:
    """Refuse, before anything is written, jobs this machine cannot submit and members that cannot train in them.

    Raises:
        ConfigError: ``--executor slurm`` without SLURM's commands here, or a member set to the tensor engine (one
            process) in jobs of several processes.
    """
    missing = [c for c in ("sbatch", "srun") if resources.executor == "slurm" and shutil.which(c) is None]
    if missing:
        raise ConfigError(f"{' and '.join(missing)} not found: --executor slurm submits from a machine of a SLURM "
                          "cluster (a login node); --executor local runs the jobs on this machine")
    if resources.processes > 1:
        for member in plan.members:
            if member.config.train.engine == "tensor":
                raise ConfigError(f"{member.name}: train.engine=tensor trains in one process, and each job runs "
                                  f"{resources.processes}; set train.engine=loader (or auto)")


def submit_sweep(plan: SweepPlan, store: RunStore, resources: Resources) -> SubmittedSweep:
    """Write the sweep folder and submit one job per member (one job array).

    Args:
        plan: from :func:`~lab.sweeps.plan_sweep` with ``ensemble=False``.
        store: the shared runs folder the sweep folder goes into.
        resources: what each job asks for.

    Raises:
        ConfigError: from :func:`check_resources` (nothing written).
        SubmissionRefused: the scheduler refused the jobs; the sweep folder stays, sweep.json saying why.
    """
    check_resources(plan, resources)
    submitit = require("submitit")  # before anything is written
    folder, runs = create_sweep(plan, store, waiting="waiting for its cluster job")
    # submitit keeps each job's pickled callable there, which the job unpickles as the submitter: in a shared runs
    # folder nobody else may read or write them (the folder is new: mkdir refuses anything already in its place)
    (folder.path / layout.JOBS).mkdir(mode=0o700)
    executor = submitit.AutoExecutor(folder=folder.path / layout.JOBS, cluster=resources.executor)
    executor.update_parameters(**resources.parameters(plan.name))
    try:
        with executor.batch():
            jobs = [executor.submit(SubmittedMember(str(run.path))) for run in runs]
    except submitit.core.utils.FailedJobError as err:
        message = f"the scheduler refused the jobs: {err}"
        write_sweep_file(folder, plan, runs, [{"state": RunState.FAILED, "message": message}] * len(runs))
        raise SubmissionRefused(f"{message} (sweep folder {folder.path})") from None
    sweep = SubmittedSweep(plan, folder, runs, jobs)
    write_sweep_file(folder, plan, runs, [run.read_status() for run in runs], sweep.job_records())
    return sweep
