"""Launching a full-scale plan and continuing it: ``reproduce.json``, the decision per run, and the executors.

The report folder holds the plan and its state in ``reproduce.json`` (the budget, seeds, papers and data, and per
run its config, overrides, processes, run folder, state, attempts and log) and one ordinary run folder per run under
``runs/``. Running the same command again continues from what the folders hold, one decision per run for both
executors (:func:`decide`, on :func:`next_action`):

- a completed run whose steps (probe, analysis, FID) have all written their output is reused;
- a completed run with steps left runs those steps;
- a stopped, preempted or killed run (its lock's process gone) resumes from ``checkpoints/last.pt``, or trains
  again from step 0 when it left no checkpoint (the earlier attempt kept under its ``history/``);
- a failed or diverged run, or one whose step failed, is reported with its log, and trained or stepped again only
  with ``retry_failed``;
- a run whose lock a live process holds, or whose cluster job is still queued or running, is left to it.

Executors: ``local`` trains here, ``torchrun --standalone`` per run with its processes, as many runs at once as the
visible GPUs allow (one at a time on CPUs, with gloo); every command's output is appended to ``logs/<key>.log``.
``slurm`` sends each run to the cluster as one job through :mod:`lab.jobs.submit` (submitit; signalled before its
time limit or on preemption, checkpointed and requeued), the steps running in the same job once it has trained.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tqdm.auto import tqdm

from lab.config import ExperimentConfig, config_path, load_config, to_dict
from lab.extras import require
from lab.jobs.submit import Resources, SubmittedMember, check_resources
from lab.reproduce.full_scale import PlannedRun, Step
from lab.reproduce.ledger import EXECUTORS, LOGS, LedgerError, check_ledger
from lab.reproduce.plan import Plan, recorded
from lab.runfolder import layout
from lab.runfolder.entries import LIMITS, read_json, read_tail
from lab.runfolder.layout import Checkpoint, LedgerState, RunState
from lab.runfolder.lock import is_stale, read_holder
from lab.runfolder.writes import atomic_write_json, open_append, own_folder
from lab.runs.catalog import checkpoint_step
from lab.runs.store import Run, RunStore
from lab.train.runner import resolved

PLAN_FILE = layout.REPRODUCTION
ACTIONS = ("done", "steps", "train", "resume", "restart", "failed", "busy")


class PlanMismatch(ValueError):
    """The report folder holds a reproduction planned otherwise (another budget); nothing is changed."""


def load_ledger(out: Path) -> dict[str, Any]:
    """``reproduce.json`` of a report folder (``{}`` when there is none), every key checked
    (:func:`~lab.reproduce.ledger.check_ledger`): the one reader of that file.

    Raises:
        LedgerError: it exists but is a link, a named pipe, not JSON or not what a launcher writes (the message names
            the key and why).
    """
    path = out / PLAN_FILE
    try:
        ledger = read_json(path, LIMITS[layout.SWEEP])
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:  # EntryError included: a link, a pipe, too large
        raise LedgerError(f"{path}: not readable as a reproduction's plan ({err}); restore it, or plan anew into "
                          "another --out") from None
    return check_ledger(ledger, path)


def ledger_for(plan: Plan, out: Path, executor: str) -> dict[str, Any]:
    """The plan's ``reproduce.json``, continuing the one ``out`` holds: its runs keep their folders and states.

    Raises:
        PlanMismatch: ``out`` holds a reproduction of another budget, or a toy reproduction's report.
    """
    earlier = load_ledger(out)
    if not earlier and (out / "claims.json").exists():
        raise PlanMismatch(f"{out} holds the report of a toy reproduction (smoke or cpu): choose another --out")
    if earlier and earlier.get("budget") != plan.budget:
        raise PlanMismatch(f"{out} holds a reproduction at the {earlier.get('budget')} budget, not {plan.budget}: "
                           "continue it with that budget, or choose another --out")
    runs = earlier.get("runs", {})
    for run in plan.runs:
        record = runs.get(run.key, {"state": LedgerState.PLANNED, "attempts": 0, "folder": None})
        runs[run.key] = {**record, **asdict(run), "log": f"{LOGS}/{run.key}.log", "recipe": fingerprint(recipe(run))}
    return {"budget": plan.budget, "papers": plan.papers, "seeds": plan.seeds,
            "data": {k: str(v) for k, v in plan.data.items()}, "executor": executor,
            "created": earlier.get("created", time.strftime("%Y-%m-%d %H:%M:%S")),
            "updated": time.strftime("%Y-%m-%d %H:%M:%S"), "not_measurable": plan.not_measurable,
            "experiments": recorded(plan), "runs": runs}


def save_ledger(out: Path, ledger: dict[str, Any]) -> None:
    ledger["updated"] = time.strftime("%Y-%m-%d %H:%M:%S")
    atomic_write_json(out / PLAN_FILE, ledger)


def folder_of(out: Path, record: dict[str, Any]) -> Run | None:
    """The run folder a ledger record names (None before it was made).

    Raises:
        ValueError: the record names anything but a folder directly inside the report folder's ``runs/``, or that
            folder or ``runs/`` is a link (a link is never followed: it could lead anywhere).
    """
    if not record.get("folder"):
        return None
    runs = out / layout.REPRODUCTION_RUNS
    path = Path(os.path.normpath(out / str(record["folder"])))
    if path.parent != Path(os.path.normpath(runs)) or os.path.islink(runs) or os.path.islink(path):
        raise ValueError(f"{out / PLAN_FILE} names a run folder outside {runs}, or a link: {record['folder']!r}")
    return Run(path)


def steps_left(run: Run, steps: list[Step]) -> list[Step]:
    """The steps whose output the run folder does not hold yet."""
    return [s for s in steps if not run.analysis_path(s.output).exists()]


def next_action(run: Run | None, steps: list[Step], record: dict[str, Any], retry_failed: bool = False) -> str:
    """What continuing a planned run does now: one of :data:`ACTIONS` (see the module docstring)."""
    if record.get("state") in (RunState.FAILED, LedgerState.STEP_FAILED) and not retry_failed:
        return "failed"
    if run is None or not run.path.is_dir():
        return "train"
    state = run.read_status().get("state")
    holder = read_holder(run.path)
    if holder is not None and not is_stale(holder):
        return "busy"
    if state == RunState.COMPLETED:
        return "steps" if steps_left(run, steps) else "done"
    if state in (RunState.FAILED, RunState.DIVERGED):
        return "restart" if retry_failed else "failed"
    if not (run.path / layout.CONFIG).exists():
        return "train"
    return "resume" if checkpoint_step(run.checkpoint_path(Checkpoint.LAST)) is not None else "restart"


def planned_config(run: PlannedRun) -> ExperimentConfig:
    """The config ``run`` trains today: its packaged config with its overrides, its engine decided."""
    return resolved(load_config(config_path(run.config), list(run.overrides)))


def recipe(run: PlannedRun) -> dict[str, Any]:
    """:func:`planned_config` as the dict a run folder's ``config.json`` holds."""
    return to_dict(planned_config(run))


def fingerprint(config: dict[str, Any]) -> str:
    """A short hash of a resolved config (``reproduce.json`` records each run's: what it was planned to train)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def recipe_changes(run: PlannedRun, folder: Run) -> list[str]:
    """The settings of today's plan for ``run`` (its overrides' keys) that its run folder trained otherwise, as
    ``key: folder's → plan's``; empty when the folder trained today's recipe (or has no readable config yet)."""
    trained = folder.read_config()
    if not trained:
        return []
    planned = recipe(run)
    changes = []
    for override in run.overrides:
        section, _, name = override.partition("=")[0].partition(".")
        had, wants = (trained.get(section) or {}).get(name), (planned.get(section) or {}).get(name)
        if had != wants:
            changes.append(f"{section}.{name}: {had!r} → {wants!r}")
    return changes


def _reuse(run: PlannedRun, folder: Run | None, record: dict[str, Any], action: str, retry_failed: bool
           ) -> tuple[Run | None, str]:
    """``(folder, action)`` once the folder is checked against today's recipe: a folder that trained another one is
    not reused; with ``retry_failed`` the run trains afresh in a new folder (the old one stays as it is), else it is
    reported failed, naming the settings that changed."""
    if folder is None or action in ("train", "failed", "busy") or not (changes := recipe_changes(run, folder)):
        return folder, action
    if retry_failed:
        record["folder"] = None
        return None, "train"
    record["state"] = RunState.FAILED
    record["message"] = (f"{folder.path.name} trained another recipe than today's plan ({'; '.join(changes)}): "
                         "train it afresh with --retry-failed (the folder is kept)")
    return folder, "failed"


SETTLED = ("done", "failed", "busy")
"""The actions of a run with nothing to do now (:func:`decide` records them)."""


def decide(run: PlannedRun, out: Path, record: dict[str, Any], retry_failed: bool = False, job_alive: bool = False
           ) -> tuple[Run | None, str]:
    """What continuing ``run`` does now, one of :data:`ACTIONS`, and the folder it does it in (None: a new one): the
    one decision of both executors (see the module docstring).

    The folder its ledger ``record`` names (:func:`folder_of`), :func:`next_action` on it (``busy`` while
    ``job_alive``: its cluster job still queued or running), then checked against today's recipe (:func:`_reuse`).
    A run with nothing to do now (:data:`SETTLED`) is recorded so (:func:`_settle`).

    Raises:
        ValueError: the record names a folder outside the report folder's ``runs/``, or a link.
    """
    folder = folder_of(out, record)
    action = "busy" if job_alive else next_action(folder, list(run.steps), record, retry_failed)
    folder, action = _reuse(run, folder, record, action, retry_failed)
    if action in SETTLED:
        _settle(record, folder, action)
    return folder, action


def _settle(record: dict[str, Any], folder: Run | None, action: str) -> None:
    """Record a run there is nothing to do for now: done, failed (its message kept) or busy elsewhere."""
    if action == "done":
        record["state"], record["message"] = RunState.COMPLETED, ""
    elif action == "busy":
        record["state"] = LedgerState.BUSY
    elif record.get("state") not in (RunState.FAILED, LedgerState.STEP_FAILED):
        record["state"] = RunState.FAILED
        record["message"] = folder.read_status().get("message", "") if folder is not None else ""


def _lab(*args: str) -> list[str]:
    return [sys.executable, "-m", "lab", *args]


def training_command(run: PlannedRun, folder: Path, action: str, processes: int | None = None,
                     extra: tuple[str, ...] = ()) -> list[str]:
    """The ``torchrun`` command that trains (``train``), continues (``resume``) or retrains (``restart``) a run, with
    ``processes`` (default: the plan's) training processes and, for ``train``, ``extra`` overrides after the plan's
    (:func:`_same_global_batch`)."""
    head = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={processes or run.processes}", "-m", "lab"]
    if action == "train":
        return [*head, "train", str(config_path(run.config)), *run.overrides, *extra, "--run-dir", str(folder),
                "--no-progress"]
    return [*head, "resume", str(folder), *(["--restart"] if action == "restart" else []), "--no-progress"]


def _devices() -> list[str]:
    """The GPUs runs are placed on (CUDA_VISIBLE_DEVICES, else every device torch sees); empty on a CPU machine."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


class _Interrupt:
    """SIGINT/SIGTERM: start nothing more, let the runs stop with a checkpoint, then return."""

    def __init__(self) -> None:
        self.requested = False
        self._old = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def _handler(self, signum: int, frame: Any) -> None:
        self.requested = True

    def restore(self) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)


def _log_tail(out: Path, record: dict[str, Any]) -> str:
    try:
        return read_tail(out / record["log"], 2000).decode(errors="replace").strip()
    except OSError:
        return ""


def _queue(plan: Plan, out: Path, ledger: dict[str, Any], devices: list[str], retry_failed: bool
           ) -> list[tuple[PlannedRun, list[list[str]]]]:
    """Per run with something to do, its commands (training and steps, or the steps left); the others settled."""
    store = RunStore(own_folder(out / layout.REPRODUCTION_RUNS))
    queue = []
    for run in plan.runs:
        record = ledger["runs"][run.key]
        folder, action = decide(run, out, record, retry_failed)
        if action in SETTLED:
            continue
        processes = min(run.processes, len(devices)) if devices else run.processes
        extra: tuple[str, ...] = ()
        if action != "steps":
            try:
                extra = _same_global_batch(run, processes, action, record)
            except ValueError as err:  # it cannot keep the paper's global batch here: not trained with another
                record["state"], record["message"] = RunState.FAILED, str(err)
                continue
            record["processes"] = processes
        if folder is None:
            folder = store.create(run.key)
            record["folder"] = str(folder.path.relative_to(out))
        steps = steps_left(folder, list(run.steps)) if action == "steps" else run.steps
        commands = [] if action == "steps" else [training_command(run, folder.path, action, processes, extra)]
        queue.append((run, commands + [_lab(*s.argv(folder.path)) for s in steps]))
    return queue


def _same_global_batch(run: PlannedRun, processes: int, action: str, record: dict[str, Any]) -> tuple[str, ...]:
    """The overrides that keep ``run``'s planned global batch on ``processes`` training processes (fewer GPUs than
    planned): more micro-batches accumulated per update where its config sets a per-process batch; none where it
    sets ``train.global_batch`` (shared out whatever the processes) or the processes are as planned.

    Raises:
        ValueError: the planned processes are not a multiple of ``processes`` (no whole accumulation keeps the
            batch), or a run to continue was launched with other processes than these (its updates so far were of
            another batch).
    """
    if action != "train":
        launched = record.get("processes", run.processes)
        if launched != processes:
            raise ValueError(f"{run.key} was launched on {launched} process(es); continue it where {launched} GPUs "
                             f"are visible, not {processes}: its global batch would change mid-run")
        return ()
    if processes == run.processes:
        return ()
    train = planned_config(run).train
    if train.global_batch:
        return ()
    if run.processes % processes:
        raise ValueError(f"{run.key} is planned for {run.processes} GPUs (global batch {train.batch_size} × "
                         f"{train.accum_steps} × {run.processes}); {processes} cannot keep it with whole "
                         f"accumulation steps: train it where {run.processes} GPUs are visible")
    return (f"train.accum_steps={train.accum_steps * run.processes // processes}",)


def _ended(record: dict[str, Any], state: str, code: int, interrupted: bool) -> None:
    """Record how a run's last command ended: its run folder's ``state`` and the command's exit ``code``."""
    if code == 0 and state == RunState.COMPLETED:
        record["state"], record["message"] = RunState.COMPLETED, ""
    elif state == RunState.COMPLETED:  # trained; a step failed (or was interrupted: it runs again next time)
        record["state"] = RunState.COMPLETED if interrupted else LedgerState.STEP_FAILED
        record["message"] = f"a step exited with {code}; see {record['log']}"
    elif interrupted and state not in (RunState.FAILED, RunState.DIVERGED):
        record["state"] = RunState.STOPPED
        record["message"] = "interrupted; the same command run again resumes it"
    else:
        record["state"] = RunState.FAILED
        record["message"] = f"{state}: exit status {code}; see {record['log']}"


def run_local(plan: Plan, out: Path, ledger: dict[str, Any], *, retry_failed: bool = False, progress: bool = True,
              poll_s: float = 0.5) -> dict[str, Any]:
    """Train and step every run of ``plan`` that is not done, on this machine (see the module docstring).

    Returns:
        The ledger as saved at the end: every run's state (``completed``, ``failed``, ``step failed``, ``stopped``
        when interrupted, ``busy`` when another process holds it).
    """
    logs = own_folder(out / LOGS)
    devices = _devices()
    queue = _queue(plan, out, ledger, devices, retry_failed)
    for run, _ in queue:  # a log that is a link or a pipe is refused before anything starts (EntryError)
        os.close(open_append(logs / f"{run.key}.log"))
    save_ledger(out, ledger)
    free = list(devices)
    active: dict[str, tuple[subprocess.Popen, list[list[str]], list[str], Any]] = {}
    interrupt, signalled = _Interrupt(), False
    bar = tqdm(total=len(queue), desc=f"reproduce ({plan.budget})", unit="run", disable=not progress,
               dynamic_ncols=True)

    def start(run: PlannedRun, commands: list[list[str]], held: list[str], first: bool = True) -> None:
        record = ledger["runs"][run.key]
        # appended, never truncated, never through a link; closed when its process ends
        log = os.fdopen(open_append(logs / f"{run.key}.log"), "ab")
        log.write(("\n$ " + " ".join(commands[0]) + "\n").encode())
        log.flush()
        env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": ",".join(held)} if devices else {})}
        proc = subprocess.Popen(commands[0], stdout=log, stderr=subprocess.STDOUT, env=env)
        active[run.key] = (proc, commands[1:], held, log)
        record["state"], record["attempts"] = RunState.RUNNING, record.get("attempts", 0) + first
        save_ledger(out, ledger)

    try:
        while queue or active:
            while queue and not interrupt.requested and not (not devices and active):
                run, commands = queue[0]
                need = min(run.processes, len(devices))
                if devices and len(free) < need:
                    break
                queue.pop(0)
                held, free[:] = free[:need], free[need:]
                start(run, commands, held)
            if interrupt.requested and not signalled:  # once: torchrun passes it on, each run stops with a checkpoint
                queue.clear()
                for proc, *_ in active.values():
                    proc.send_signal(signal.SIGTERM)
                signalled = True
            time.sleep(poll_s)
            for key in [k for k, (proc, *_) in active.items() if proc.poll() is not None]:
                proc, rest, held, log = active.pop(key)
                log.close()
                run, record = next(r for r in plan.runs if r.key == key), ledger["runs"][key]
                state = folder_of(out, record).read_status().get("state", "unknown")
                if proc.returncode == 0 and rest and state == RunState.COMPLETED and not interrupt.requested:
                    start(run, rest, held, first=False)
                    continue
                free += held
                bar.update(1)
                _ended(record, state, proc.returncode, interrupt.requested)
                save_ledger(out, ledger)
    finally:
        interrupt.restore()
        bar.close()
    ledger["interrupted"] = interrupt.requested
    save_ledger(out, ledger)
    return ledger


def run_slurm(plan: Plan, out: Path, ledger: dict[str, Any], resources: Resources, *, retry_failed: bool = False
              ) -> dict[str, Any]:
    """Submit one job per run not done (:class:`SubmittedReproduction`), without waiting; the command run again later
    continues or collects. A run whose job is still queued or running is left to it."""
    submitit = require("submitit")

    store = RunStore(own_folder(out / layout.REPRODUCTION_RUNS))
    jobs_dir = own_folder(out / layout.JOBS, private=True)
    for run in plan.runs:
        record = ledger["runs"][run.key]
        alive = bool(record.get("job_id")) and _job_alive(jobs_dir, record["job_id"], resources.executor)
        folder, action = decide(run, out, record, retry_failed, job_alive=alive)
        if action in SETTLED:
            continue
        cfg = planned_config(run)
        if folder is None:
            folder = store.create(run.key)
            folder.write_config(to_dict(cfg))
            folder.write_status(RunState.QUEUED, "waiting for its cluster job")
            record["folder"] = str(folder.path.relative_to(out))
        if action == "restart":
            from lab.train.resume import plan_resume

            plan_resume(folder, "restart")  # sets the failed attempt aside, kept under history/
        job_resources = Resources(**{**asdict(resources), "gpus_per_node": run.processes if resources.gpus_per_node
                                     else 0, "tasks_per_node": run.processes})
        check_resources(SimpleNamespace(members=[SimpleNamespace(name=run.key, config=cfg)]), job_resources)
        executor = submitit.AutoExecutor(folder=jobs_dir, cluster=job_resources.executor)
        executor.update_parameters(**job_resources.parameters(run.key))
        job = executor.submit(SubmittedReproduction(str(folder.path), [list(s.args) for s in run.steps]))
        record.update(state=LedgerState.SUBMITTED, job_id=job.job_id, attempts=record.get("attempts", 0) + 1,
                      stdout=str(job.paths.stdout), stderr=str(job.paths.stderr))
        save_ledger(out, ledger)
    save_ledger(out, ledger)
    return ledger


def _job_alive(jobs_dir: Path, job_id: str, cluster: str) -> bool:
    """Whether a SLURM job is still queued or running (sacct through submitit)."""
    if cluster != "slurm":
        return False
    submitit = require("submitit")

    try:
        state = submitit.SlurmJob(folder=jobs_dir, job_id=job_id).state
    except Exception:  # sacct missing or failing: the run folder decides
        return False
    return state in ("PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING")


def _steps_after(run_path: str, steps: list[list[str]]) -> int:
    """Run the steps whose output is missing on a trained folder; 0 when all succeeded."""
    for args in steps:
        step = Step(tuple(args), "")
        code = subprocess.call(_lab(*step.argv(Path(run_path))))
        if code != 0:
            return code
    return 0


class SubmittedReproduction(SubmittedMember):
    """A cluster job's callable: train the run folder as ``lab submit`` does (requeued after preemption), then,
    on rank 0, run its steps."""

    def __init__(self, run_path: str, steps: list[list[str]]) -> None:
        super().__init__(run_path)
        self.steps = steps

    def __call__(self) -> dict[str, Any]:
        status = super().__call__()
        if status.get("state") == RunState.COMPLETED and int(os.environ.get("RANK", "0")) == 0 and \
                _steps_after(self.run_path, self.steps) != 0:
            raise RuntimeError(f"{self.run_path}: a step failed")
        return status


def failures(out: Path, ledger: dict[str, Any]) -> list[str]:
    """A line per failed run: its state, message and the end of its log."""
    lines = []
    for key, record in ledger["runs"].items():
        if record.get("state") in (RunState.FAILED, LedgerState.STEP_FAILED):
            tail = _log_tail(out, record)
            lines.append(f"{key}: {record['state']}: {record.get('message', '')}"
                         + (f"\n    log ({record['log']}), last lines:\n    " + tail[-800:].replace("\n", "\n    ")
                            if tail else ""))
    return lines


__all__ = ["EXECUTORS", "PLAN_FILE", "LedgerError", "PlanMismatch", "SubmittedReproduction", "decide", "failures",
           "ledger_for", "load_ledger", "next_action", "run_local", "run_slurm", "save_ledger", "training_command"]
