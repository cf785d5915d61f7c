"""A page's run trained in a child process: controlled like a thread job, but apart from the server.

A server's sessions share one interpreter: a run trained in a thread shares the GIL with every session's callbacks,
and a run that hangs or crashes takes them all with it. A :class:`ChildJob` trains the same in-process job (a
:class:`~lab.jobs.thread.ThreadJob` for a run, :meth:`ChildJob.training`; a :class:`~lab.jobs.sweep_job.SweepJob`
for one ensemble of a sweep, :meth:`ChildJob.sweeping`) inside a child process instead, and the server only reads
and draws. Runs in lockstep (:meth:`ChildJob.lockstep`) train in one child, each in its thread, so they stay in
lockstep exactly as in the server (:class:`~lab.jobs.lockstep.Lockstep`); each has its own :class:`ChildJob`:

* the child writes the run folder (status, metrics, checkpoints) as any run does; a sweep's metrics are read from
  its members' folders;
* snapshots cross a pipe at the cadence the page asked for (on-demand kinds only when asked, as in a thread), into
  the same latest-version slots a thread job keeps;
* pause, single steps, resume, stop and "build the next snapshot" cross a second pipe, and act between steps exactly
  as they do on a thread job.

Children come from a fork server (a clean process that has imported the lab once): a job starts in a fraction of a
second without inheriting the server's threads. A child that cannot make its jobs (a model registered only in the
server, such as one a notebook cell defined; a builder it cannot unpickle) records each of its runs ``failed`` with
that error before it exits, as a run that fails while training records its own. A child that dies (killed, out of
memory) is reported ``failed`` with its exit code at the next status poll; its run folder keeps its last checkpoint.
A snapshot kind that a run's model cannot give is dropped for that run and noted in its status
(:mod:`lab.jobs.notes`). A child whose server is gone (its pipe closed) stops its run after the current step and
exits, so no orphan trains on. A stop asked for returns at once: the child is given :data:`GRACE_S` seconds to end
the step it is in (a long evaluation included), then SIGTERM, then SIGKILL, by a thread of the server, and a run
ended that way is recorded ``stopped``, as asked, not ``failed``.

A CPU child takes cores of its own while every CPU child can have its own (:mod:`lab.jobs.cores`): it trains there at
the server's priority while the sessions and a browser use the other cores; otherwise children run niced by
:data:`NICE`, and the sessions come first.

Builders and callbacks must be picklable (module-level functions, as the kinds' own builders:
:mod:`lab.snapshots.kinds`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
import pickle
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from lab.config import ExperimentConfig, from_dict, to_dict
from lab.jobs import cores
from lab.jobs.job import InProcessJob, Job, exited_status, record_failure
from lab.jobs.lockstep import Lockstep
from lab.jobs.sweep_job import MemberRecords, SweepJob
from lab.runfolder.layout import RunState
from lab.runs.store import Run
from lab.train.core import cpu_threads

if TYPE_CHECKING:
    from lab.sweeps import SweepPlan

_CONTEXT = multiprocessing.get_context("forkserver")
# what a run imports on its first step (TensorBoard's writer, torch's compiler stack that the optimisers consult):
# imported once in the fork server, a job trains within a tenth of a second of its start rather than seconds
_CONTEXT.set_forkserver_preload(["lab.jobs.child", "lab.jobs.thread", "lab.jobs.sweep_job", "torch.utils.tensorboard",
                                 "torch._dynamo"])
POLL_S = 0.02
"""How often a child looks for commands and new snapshots."""
NICE = 10
"""How much lower the CPU priority of a child without cores of its own is than the server's: the sessions' callbacks
(a slider's effect, a snapshot drawn) come first, and training takes the CPU time they leave."""
CHECK_S = 0.5
"""How often a child with cores of its own looks whether another child waits for some (and then gives them up)."""
GRACE_S = 5.0
"""How long a child asked to stop may take to end its current step before it is sent SIGTERM, and SIGTERM before
SIGKILL."""
PIPE_BYTES = 1 << 20
"""The snapshot pipe's buffer (Linux's default is 64 KiB, the most an unprivileged process may ask is 1 MiB unless
``/proc/sys/fs/pipe-max-size`` says more): a 32 × 32 nodes snapshot, 2.9 MB, then crosses in three writes
rather than forty-odd, each of which would wake the server's receiving thread and put the child's to sleep."""


def warm_up() -> threading.Thread:
    """Start the fork server in the background (it imports the lab once, which takes seconds), so that the first
    job a page starts does not wait for it."""
    thread = threading.Thread(target=multiprocessing.forkserver.ensure_running, name="lab-forkserver", daemon=True)
    thread.start()
    return thread


def _train_jobs(cfgs: list[dict[str, Any]], runs: list[str], kwargs: dict[str, Any]) -> list[InProcessJob]:
    """In the child: the thread job of each run, its status noting the snapshot kinds it drops; two or more train in
    lockstep."""
    from lab.jobs.thread import ThreadJob  # the fork server has it imported already

    group = Lockstep(len(cfgs)) if len(cfgs) > 1 else None
    callbacks = tuple(kwargs.pop("callbacks", ()))
    return [ThreadJob(from_dict(ExperimentConfig, cfg), Run(Path(run)), **kwargs,
                      callbacks=(*callbacks, group.member(k)) if group else callbacks)
            for k, (cfg, run) in enumerate(zip(cfgs, runs, strict=True))]


def _sweep_job(plan: SweepPlan, folder: str, runs: list[str], kwargs: dict[str, Any]) -> list[InProcessJob]:
    """In the child: the sweep job of one ensemble."""
    return [SweepJob(plan, Run(Path(folder)), [Run(Path(r)) for r in runs], **kwargs)]


def _child(folders: list[tuple[str, list[str]]], work: bytes, threads: int, locks: Path | None,
           control: Connection, snapshots: Connection) -> None:
    """The child's main: place itself on ``threads`` cores in the ledger ``locks`` or niced
    (:class:`~lab.jobs.cores.Placement`), train the jobs ``make(*args)`` (``work``, pickled by the server, is
    ``(make, args)``), obey ``control`` (``(job, op, arg)``), send each job's new snapshots down ``snapshots``
    (``(job, kind, version, payload)``) and, once it has ended, ``(job, None, None, None)``.

    ``folders`` holds each job's run folder and, for a sweep, its members' (plain strings, which always unpickle):
    an error before the jobs train (``work`` that does not unpickle here, a config this process cannot build) is
    recorded in each of them, as is one that ended a job without its run recording it."""
    try:
        placement = cores.Placement(threads, NICE, locks)
        make, args = pickle.loads(work)
        jobs = [job.start() for job in make(*args)]
    except BaseException as err:
        for folder, members in folders:
            record_failure(Run(Path(folder)), err, [Run(Path(m)) for m in members])
        raise
    sent: list[dict[str, int]] = [{} for _ in jobs]
    ended: set[int] = set()
    asked: set[int] = set()

    def stop(k: int) -> None:
        jobs[k].stop(timeout=0)
        asked.add(k)
        if len(asked) == len(jobs):  # the run a page starts in their place may take the cores now
            placement.release()

    actions = {"pause": lambda k, _: jobs[k].pause(), "resume": lambda k, _: jobs[k].resume(),
               "step": lambda k, n: jobs[k].step(n), "stop": lambda k, _: stop(k),
               "request": lambda k, kind: jobs[k].request(kind)}

    def send_new() -> None:
        for k, job in enumerate(jobs):
            if k in ended:
                continue
            alive = job.is_alive()  # read first: a job that ends meanwhile sends its final snapshots below
            for kind in job.kinds():
                latest = job.latest(kind)
                if latest is not None and latest[0] != sent[k].get(kind):
                    _send(snapshots, (k, kind, *latest))
                    sent[k][kind] = latest[0]
            if not alive:
                ended.add(k)
                _send(snapshots, (k, None, None, None))

    def stop_all() -> None:
        for job in jobs:
            job.stop(timeout=0)

    server = True  # whether the server is still there to control and draw these runs
    checked = time.monotonic()
    try:
        while len(ended) < len(jobs):
            if time.monotonic() - checked > CHECK_S:
                placement.check()
                checked = time.monotonic()
            try:
                while server and control.poll(POLL_S):
                    k, op, arg = control.recv()
                    actions[op](k, arg)
            except (EOFError, OSError):  # the server is gone: nobody will see these runs again
                server = False
                stop_all()
            if server:
                send_new()
            else:
                ended.update(k for k, job in enumerate(jobs) if not job.is_alive())
                time.sleep(POLL_S)
    except OSError:  # BrokenPipeError: the server went while a snapshot was on its way
        stop_all()
    for job in jobs:
        job.wait()
    for job, (_, members) in zip(jobs, folders, strict=True):
        if job.error is not None:  # the runner recorded it, unless it came before training began (a setting)
            record_failure(job.run, job.error, [Run(Path(m)) for m in members])
    raise SystemExit(1 if any(job.error is not None for job in jobs) else 0)


def _cpu_threads(cfg: ExperimentConfig) -> int:
    """The cores a child training ``cfg`` keeps busy, to take for itself (:mod:`lab.jobs.cores`): its torch threads
    on a CPU; 0 (take none) for a GPU run, whose CPU mostly waits on the device, and for threads=0 (torch's default:
    every core)."""
    device = cfg.train.device
    on_cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
    return cpu_threads(cfg.train.threads) if on_cpu else 0


def _widen(pipe: Connection) -> None:
    """Give ``pipe`` a buffer of :data:`PIPE_BYTES` where the system allows it (Linux); elsewhere it keeps its own."""
    with contextlib.suppress(ImportError, AttributeError, OSError):
        import fcntl

        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)


def _send(pipe: Connection, message: Any) -> None:
    """Send ``message`` with its arrays' bytes written straight from their memory (pickle protocol 5's out-of-band
    buffers): ``Connection.send`` would first copy each array into its pickle, a 2.9 MB copy per nodes snapshot."""
    buffers: list[pickle.PickleBuffer] = []
    header = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    views = [b.raw() for b in buffers]
    pipe.send((header, [v.nbytes for v in views]))
    for view in views:
        pipe.send_bytes(view)


def _receive(pipe: Connection) -> Any:
    """A message :func:`_send` sent; its arrays own their (writable) memory, as a thread job's do."""
    header, sizes = pipe.recv()
    buffers = []
    for size in sizes:
        buffer = bytearray(size)
        pipe.recv_bytes_into(buffer)
        buffers.append(buffer)
    return pickle.loads(header, buffers=buffers)


class _Child:
    """The server's side of one child process: its control pipe and each of its jobs' newest snapshots."""

    def __init__(self, make: Callable[..., list[InProcessJob]], args: tuple[Any, ...],
                 folders: list[tuple[str, list[str]]], name: str, threads: int = 0) -> None:
        self._work, self._folders = pickle.dumps((make, args)), folders
        self._name, self._threads = name, threads
        size = len(folders)
        self.proc: multiprocessing.process.BaseProcess | None = None
        self.slots: list[dict[str, tuple[int, dict[str, np.ndarray]]]] = [{} for _ in range(size)]
        self.ended = [False] * size
        self.listeners: list[tuple[Callable[[], None], ...]] = [() for _ in range(size)]  # each job's (Job.listen)
        self.lock = threading.Lock()
        self._control: Connection | None = None
        self.asked = [False] * size  # which of its jobs the user asked to stop
        self.ended_by: str | None = None  # how the child was ended when it would not stop (SIGTERM, SIGKILL)
        self.jobs: list[ChildJob] = []  # its jobs, in index order (each registers itself)
        self._escalations: dict[int, threading.Thread] = {}
        self._settling = threading.Lock()

    def start(self) -> None:
        """Start the process (once, whichever of its jobs starts first)."""
        if self.proc is not None:
            return
        self._control, child_control = _CONTEXT.Pipe()
        receive, send = _CONTEXT.Pipe(duplex=False)
        _widen(send)
        self.proc = _CONTEXT.Process(target=_child, name=self._name, daemon=True,
                                     args=(self._folders, self._work, self._threads, cores.ledger(), child_control,
                                           send))
        self.proc.start()
        child_control.close()
        send.close()
        threading.Thread(target=self._receive, args=(receive,), name=f"{self._name}-snapshots", daemon=True).start()

    def _receive(self, snapshots: Connection) -> None:
        """Fill the snapshot slots from the child's snapshots until it closes its end."""
        while True:
            try:
                k, kind, version, payload = _receive(snapshots)
            except (EOFError, OSError):
                return
            with self.lock:
                if kind is None:
                    self.ended[k] = True
                else:
                    self.slots[k][kind] = (version, payload)
            if kind is not None:
                for callback in self.listeners[k]:
                    callback()

    def send(self, k: int, op: str, arg: Any = None) -> None:
        if self.is_alive():
            with contextlib.suppress(BrokenPipeError, OSError):  # it just ended: its jobs' statuses say how
                self._control.send((k, op, arg))

    def is_alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    @property
    def exitcode(self) -> int | None:
        return None if self.proc is None else self.proc.exitcode

    def escalate(self, index: int, grace: float) -> None:
        """Make sure job ``index``, asked to stop, ends: once a thread of this process has given it ``grace`` seconds,
        SIGTERM the child, and SIGKILL it ``grace`` seconds later (one such thread per job). A child so ended has
        its jobs' statuses recorded by that thread (:meth:`ChildJob.status`): the page that asked has dropped them
        (Reset), and nobody else would."""
        if index in self._escalations or self.proc is None:
            return

        def ended() -> bool:
            with self.lock:
                return self.ended[index]

        def run() -> None:
            deadline = time.monotonic() + grace
            while self.is_alive() and not ended() and time.monotonic() < deadline:
                time.sleep(POLL_S)
            for sig, how in ((self.proc.terminate, "SIGTERM"), (self.proc.kill, "SIGKILL")):
                if not self.is_alive() or ended():
                    break
                self.ended_by = f"its process did not end its step within {grace:g} s and was ended by {how}"
                sig()
                self.proc.join(grace)
            if self.ended_by is not None and not self.is_alive():
                with self._settling:  # another job's thread may have ended the child too
                    for job in self.jobs:
                        job.status()

        self._escalations[index] = thread = threading.Thread(target=run, name=f"{self._name}-stop-{index}",
                                                             daemon=True)
        thread.start()


class ChildJob(Job):
    """One job of a child process, controlled and drawn as that job would be in a thread of the server: build one
    with :meth:`training` (a run), :meth:`sweeping` (an ensemble of a sweep), or several with :meth:`lockstep`.

    Args:
        child: the child process that trains it.
        index: which of that child's jobs it is.
        run: the folder the job writes (a sweep's: the sweep folder).
        owner: who started it (a browser session id), for :class:`~lab.jobs.manager.JobManager`.
        paused: whether it starts paused.
        records: where its metrics are read (default: ``run``'s metrics.jsonl).
    """

    def __init__(self, child: _Child, index: int, run: Run, *, owner: str | None = None, paused: bool = False,
                 records: MemberRecords | None = None) -> None:
        self.child, self.index, self.run, self.owner, self._records = child, index, run, owner, records
        child.jobs.append(self)
        self._pausing = paused  # asked to pause, until the child's status says it trains again

    @classmethod
    def training(cls, cfg: ExperimentConfig, run: Run, *, owner: str | None = None, paused: bool = False,
                 **job_kwargs: Any) -> ChildJob:
        """Train ``cfg`` into ``run`` as a :class:`~lab.jobs.thread.ThreadJob` would, whose keyword arguments
        ``job_kwargs`` are (cadence, builders, on_demand, disk_every_s, resume, callbacks; picklable); ``data`` is not
        sent: the child builds it from ``cfg``."""
        (job,) = cls.lockstep([cfg], [run], owner=owner, paused=paused, **job_kwargs)
        return job

    @classmethod
    def lockstep(cls, cfgs: Sequence[ExperimentConfig], runs: Sequence[Run], *, owner: str | None = None,
                 paused: bool = False, **job_kwargs: Any) -> list[ChildJob]:
        """Train ``cfgs`` into ``runs`` in one child, in lockstep when more than one (their jobs share a ``group``, so
        they hold one slot of their manager); ``job_kwargs`` as :meth:`training`'s."""
        job_kwargs.pop("data", None)
        args = ([to_dict(c) for c in cfgs], [str(r.path) for r in runs], {**job_kwargs, "paused": paused})
        child = _Child(_train_jobs, args, [(str(r.path), []) for r in runs], f"lab-job-{runs[0].id}",
                       threads=max(_cpu_threads(c) for c in cfgs))  # in lockstep: one trains at a time
        jobs = [cls(child, k, run, owner=owner, paused=paused) for k, run in enumerate(runs)]
        if len(jobs) > 1:
            for job in jobs:
                job.group = child
        return jobs

    @classmethod
    def sweeping(cls, plan: SweepPlan, folder: Run, runs: Sequence[Run], *, owner: str | None = None,
                 paused: bool = False, **job_kwargs: Any) -> ChildJob:
        """Train the one-group ``plan`` into ``folder`` and ``runs`` as a :class:`~lab.jobs.sweep_job.SweepJob`
        would, whose keyword arguments ``job_kwargs`` are; its metrics are its members', tagged by member."""
        args = (plan, str(folder.path), [str(r.path) for r in runs], {**job_kwargs, "paused": paused})
        child = _Child(_sweep_job, args, [(str(folder.path), [str(r.path) for r in runs])], f"lab-job-{folder.id}",
                       threads=_cpu_threads(plan.members[0].config))  # one process trains the whole ensemble
        return cls(child, 0, folder, owner=owner, paused=paused, records=MemberRecords(runs))

    def start(self) -> ChildJob:
        self.child.start()
        return self

    @property
    def proc(self) -> multiprocessing.process.BaseProcess | None:
        """The child process (shared by the jobs of one lockstep group)."""
        return self.child.proc

    @property
    def members(self) -> list[Run]:
        """A sweep's member runs, in plan order (none for a run)."""
        return [] if self._records is None else self._records.runs

    # -- control ----------------------------------------------------------------------------------------------
    def pause(self) -> None:
        self._pausing = True
        self.child.send(self.index, "pause")

    def resume(self) -> None:
        """Go on training; raises :class:`~lab.jobs.manager.ManagerBusy` when the manager has no free slot."""
        if self.is_paused():
            self.admission(self)
        self._pausing = False
        self.child.send(self.index, "resume")

    def step(self, n: int = 1) -> None:
        """Train ``n`` more steps, then pause again (needs a free slot, as :meth:`resume`)."""
        if self.is_paused():
            self.admission(self)
        self._pausing = False
        self.child.send(self.index, "step", n)

    def request(self, kind: str) -> None:
        self.child.send(self.index, "request", kind)

    def stop(self, timeout: float = 5.0, grace: float = GRACE_S) -> None:
        """Stop after the current step (the run saves its checkpoint), waiting up to ``timeout`` s (0: not at all).
        A child that has not ended the run ``grace`` s after the request is sent SIGTERM, then SIGKILL (with the
        other runs it trains), by a thread of this process; the run is recorded ``stopped`` either way."""
        self.child.asked[self.index] = True
        self.child.send(self.index, "stop")
        if self.proc is None:
            return
        self.child.escalate(self.index, grace)
        deadline = time.monotonic() + timeout
        while self.is_alive() and time.monotonic() < deadline:
            time.sleep(POLL_S)
        self._reap()
        self.status()

    @property
    def stopping(self) -> bool:
        return self.child.asked[self.index] and self.is_alive()

    def kill(self) -> None:
        """SIGKILL the child at once (as a crash would), with every run it trains."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.join()

    # -- state ------------------------------------------------------------------------------------------------
    def is_alive(self) -> bool:
        """Whether its run still trains: the child lives and has not said that this job ended."""
        with self.child.lock:
            ended = self.child.ended[self.index]
        return self.child.is_alive() and not ended

    def is_paused(self) -> bool:
        """Asked to pause (or paused after its single steps, as its status says) and alive."""
        return self.is_alive() and (self._pausing or self.run.read_status().get("state") == RunState.PAUSED)

    def status(self) -> dict[str, Any]:
        """status.json; a child that died without finishing is reported, and recorded, as ``failed`` with its exit
        code (its last checkpoint stays), as is each unfinished member of a sweep."""
        asked = self.child.asked[self.index]
        how = self.child.ended_by or f"its process ended with code {self.child.exitcode}"
        return exited_status(self.run, self.child.exitcode, self.members, stopped=how if asked else None)

    def latest(self, kind: str) -> tuple[int, dict[str, np.ndarray]] | None:
        with self.child.lock:
            return self.child.slots[self.index].get(kind)

    def listen(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` from the thread that receives the child's snapshots, each time one of this job's
        lands."""
        self.child.listeners[self.index] = (*self.child.listeners[self.index], callback)

    def kinds(self) -> list[str]:
        """The snapshot kinds received so far."""
        with self.child.lock:
            return list(self.child.slots[self.index])

    def wait(self, timeout: float | None = None, poll: float = 0.05) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.is_alive() and (deadline is None or time.monotonic() < deadline):
            time.sleep(poll)
        self._reap()
        return self.status()

    def _reap(self) -> None:
        """Once every job of the child has ended, wait for the child to exit (a second at most)."""
        if self.proc is not None and all(self.child.ended):
            self.proc.join(1.0)

    def metrics_since(self, cursor: int = 0) -> tuple[list[dict[str, Any]], int]:
        if self._records is not None:
            return self._records.since(cursor)
        return super().metrics_since(cursor)
