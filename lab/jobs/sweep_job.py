"""One ensemble of a sweep trained inside this process, in a daemon thread: the sweep job pages start.

A :class:`SweepJob` is to a sweep what :class:`~lab.jobs.thread.ThreadJob` is to a run: the UI thread controls it
(pause, single steps, resume, stop) and polls its snapshot slot, the training thread checks the controls after
every step, and both sides take the job's lock. Training is :func:`~lab.sweeps.train_sweep` itself, so the
sweep folder and its member run folders are exactly those of ``python -m lab sweep``; the job adds a status.json
to the sweep folder (the state of the whole and of every member) and ``rank`` snapshots
(:func:`~lab.analysis.rank_sweep.sweep_rank_metrics` of every member) between steps.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import yaml

from lab.config import ExperimentConfig, flatten, to_dict
from lab.jobs.job import InProcessJob
from lab.nn.mlp import ResidualMLP
from lab.reports.sweep_snapshot import rank_snapshot
from lab.runfolder.layout import RunState
from lab.runs.store import Run, end_state
from lab.snapshots.cadence import Cadence
from lab.snapshots.kinds import RANK
from lab.snapshots.snapshot import Snapshot
from lab.sweeps import SweepPlan, final_status, plan_sweep, train_sweep
from lab.train.core import Callback
from lab.train.ensemble import EnsembleTrainer


def _text(value: Any) -> str:
    """An override value as YAML that parses back to ``value`` (floats such as 1e-05 keep their dot)."""
    if isinstance(value, str) and "," in value:
        return yaml.safe_dump(value, default_style='"').strip()
    data = list(value) if isinstance(value, tuple) else value
    return yaml.safe_dump(data, default_flow_style=True, width=2**31).removesuffix("...\n").strip()


def plan_from_config(cfg: ExperimentConfig, values: Mapping[str, Sequence[Any]]) -> SweepPlan:
    """A sweep of ``cfg`` over ``values`` (e.g. ``{"model.alpha_min": [1.0, 0.8, 0.6]}``), for pages that hold a
    config object rather than a YAML file.

    Planned by :func:`~lab.sweeps.plan_sweep` from the defaults, with the keys where ``cfg`` differs from them as
    fixed overrides, so the plan is validated and its members named exactly as the command line's; its
    ``config_path`` is empty.

    Raises:
        ConfigError: as :func:`~lab.sweeps.plan_sweep` (a key with fewer than two values is not swept).
    """
    defaults = flatten(to_dict(ExperimentConfig()))
    fixed = [f"{k}={_text(v)}" for k, v in flatten(to_dict(cfg)).items() if k not in values and defaults.get(k) != v]
    swept = [f"{k}={','.join(_text(v) for v in vs)}" for k, vs in values.items()]
    return replace(plan_sweep(None, [*fixed, *swept]), config_path="")


def group_plan(plan: SweepPlan, group: int) -> SweepPlan:
    """The part of ``plan`` that trains as its ensemble number ``group``: those members, one group.

    Raises:
        IndexError: no such group.
    """
    if not 0 <= group < len(plan.groups):
        raise IndexError(f"the sweep has {len(plan.groups)} ensemble group(s); got group={group}")
    members = [plan.members[i] for i in plan.groups[group]]
    swept = {k: [v for v in vs if any(m.values[k] == v for m in members)] for k, vs in plan.swept.items()}
    return replace(plan, swept=swept, members=members, groups=[list(range(len(members)))])


class _Driver(Callback):
    """The job's hands inside the ensemble's loop: controls, divergence reports, status and rank snapshots."""

    def __init__(self, job: SweepJob) -> None:
        self.job = job

    def on_train_start(self, ensemble: EnsembleTrainer) -> None:
        self.job._ensemble = ensemble
        self.job._write_status(RunState.RUNNING, f"training from step {ensemble.step}")
        self.job._publish(force=True)
        self.job._control(stepped=False)

    def on_step_end(self, ensemble: EnsembleTrainer, losses: dict[int, float]) -> None:
        job = self.job
        job._report_ended()
        job._control(stepped=True)
        job._publish()
        if time.monotonic() - job._last_beat >= job.heartbeat_s:
            job._write_status(RunState.RUNNING, f"step {ensemble.step} of {ensemble.total_steps}")

    def on_eval_end(self, ensemble: EnsembleTrainer, metrics: dict[int, dict[str, float]]) -> None:
        self.job._evals += 1
        self.job._report_ended()

    def on_train_end(self, ensemble: EnsembleTrainer) -> None:
        self.job._report_ended()
        self.job._publish(force=True)


class MemberRecords:
    """The metric records of a sweep's members, read incrementally from their run folders as one list.

    Each record is tagged ``{"member": k, ...}``. The cursor of :meth:`since` is a count of records, not a byte
    offset (each member has its own metrics.jsonl): every read's new records are appended ordered by step (then
    member), and :meth:`since` returns the records from index ``cursor`` on with the list's length, the next cursor.
    Start with 0. Any thread may read; whoever trains the members (this process or a child) only writes the files.
    """

    def __init__(self, runs: Sequence[Run]) -> None:
        self.runs = list(runs)
        self._lock = threading.Lock()
        self._offsets = [0] * len(self.runs)
        self._records: list[dict[str, Any]] = []

    def since(self, cursor: int = 0) -> tuple[list[dict[str, Any]], int]:
        with self._lock:
            new = []
            for k, run in enumerate(self.runs):
                records, self._offsets[k] = run.read_metrics(self._offsets[k])
                new.extend({"member": k, **r} for r in records)
            new.sort(key=lambda r: r.get("step", 0))  # stable: members stay in order within a step
            self._records.extend(new)
            return self._records[cursor:], len(self._records)


class SweepJob(InProcessJob):
    """Train a one-group sweep plan in this process, in a daemon thread, into a :func:`~lab.sweeps.create_sweep`
    folder, publishing ``rank`` snapshots.

    ``run`` is the sweep folder. Its status.json is kept current: ``state`` (queued, running, paused, then
    completed, stopped, diverged when every member diverged, or failed), ``message``, ``step``, ``total_steps``
    and ``members``, one entry per member: ``name``, ``run`` (its folder's id), ``state`` (as the job's while it
    trains; ``diverged``, ``completed`` or ``stopped`` once it ended), ``message`` (for a diverged member, the
    step and the likely cause), ``step`` (for a diverged member, the step whose loss was not finite) and ``metrics``
    (its last evaluation). A diverged member's own status.json says so at once, while the others go on; live
    members' status.json read ``paused`` while the job is paused, as a paused :class:`~lab.jobs.ThreadJob`'s does.

    The ``rank`` snapshot (a :class:`~lab.snapshots.publish.Snapshot`; K members, L blocks, m held-out points) holds
    :func:`~lab.analysis.rank_sweep.sweep_rank_metrics` of every member — ``effective_rank``, ``eq6_entropy``,
    ``probe_acc`` [K, L+1], ``pearson_r_effective_rank``, ``pearson_r_eq6_entropy`` (diverged members left out),
    ``pca`` [K, m, 2], ``labels`` [m] — on the first ``points`` test points, the probe fitted on the first
    ``points`` training points; and ``alpha_min`` [K], ``alphas`` [K, L] (every member's α per block),
    ``member_names`` [K] (str), ``train_acc``, ``test_acc``, ``train_loss`` and ``test_loss`` [K] (each member's
    latest evaluation; NaN before its first), ``task``, ``eval_step`` [K] (the step of that evaluation, −1 before
    the first), ``diverged`` [K] (bool) and
    ``step``. A diverged member's rows describe its last finite parameters.

    Snapshots are built between steps, after the step and before its evaluation (so a snapshot at an evaluation step
    shows the previous one's accuracies; ``eval_step`` says which): when due by ``cadence`` (and, if ``on_demand``,
    asked for with :meth:`request`; the rule of every publisher, :class:`~lab.snapshots.cadence.Cadence`), and always at
    the start, at a pause and at the end, unless the newest snapshot already shows that state. NaN in a snapshot means
    "undefined" (a correlation over fewer than three members, accuracies before the first evaluation): snapshots are
    published as built.

    Args:
        plan: a plan with one ensemble group (:func:`group_plan` takes one out of a larger plan).
        folder: the sweep folder, and ``runs`` the members' run folders in plan order, from
            :func:`~lab.sweeps.create_sweep`.
        runs: see ``folder``.
        cadence: ``(every_n_steps, every_t_seconds)`` between rank snapshots, seconds counted from the end of the last
            build; either may be 0 (off). The default, a snapshot after each second of training, bounds what snapshots
            cost the training: on one CPU thread a snapshot of six 32 × 32 members takes as long as ten of their steps.
        on_demand: build a due snapshot only once :meth:`request` asked for it (a page asks for the next snapshot once
            it has drawn the last, so no snapshot is computed that nobody will see).
        points: held-out points, and probe training points, per snapshot.
        ridge: the probe's relative ridge penalty (:func:`~lab.analysis.rank_sweep.ridge_probe_accuracy`).
        paused: start paused, before the first step (train only when :meth:`resume` or :meth:`step` is called).
        owner: who started it (a browser session id), for :class:`~lab.jobs.manager.JobManager`.
        progress: show a progress bar.
        heartbeat_s: minimum seconds between status.json rewrites while training.

    Raises:
        ValueError: a plan of more than one group, or a run list that does not match it.
    """

    def __init__(self, plan: SweepPlan, folder: Run, runs: Sequence[Run], *, cadence: tuple[int, float] = (0, 1.0),
                 on_demand: bool = False, points: int = 512, ridge: float = 1e-3, paused: bool = False,
                 owner: str | None = None, progress: bool = False, heartbeat_s: float = 1.0) -> None:
        if len(plan.groups) != 1:
            raise ValueError(f"a sweep job trains one ensemble; this plan has {len(plan.groups)} groups "
                             "(take one with group_plan)")
        if len(runs) != len(plan.members):
            raise ValueError(f"{len(plan.members)} members but {len(runs)} run folders")
        self.plan, self.run, self.runs, self.owner, self.progress = plan, folder, list(runs), owner, progress
        self.member_names = [m.name for m in plan.members]
        self.cadence = Cadence({RANK: cadence}, (RANK,) if on_demand else ())
        self.on_demand, self.points, self.ridge = on_demand, points, ridge
        self.heartbeat_s = heartbeat_s
        self._init_control(paused)
        self._slot: tuple[int, Snapshot] | None = None
        self._thread = threading.Thread(target=self._main, name=f"lab-sweep-{folder.id}", daemon=True)
        self.error: BaseException | None = None
        self._records = MemberRecords(self.runs)
        # training thread only
        self._ensemble: EnsembleTrainer | None = None
        self._models: list[ResidualMLP] | None = None
        self._evals = 0
        self._reported: set[int] = set()
        self._snapshot_state: tuple[int, int, int] | None = None
        self._last_beat = 0.0

    # -- control (any thread) ---------------------------------------------------------------------------------
    def start(self) -> SweepJob:
        self._write_status(RunState.QUEUED, "starting")
        self._thread.start()
        return self

    def request(self, kind: str) -> None:
        if kind == RANK:
            self.cadence.request(kind)

    def latest(self, kind: str) -> tuple[int, Snapshot] | None:
        with self._lock:
            return self._slot if kind == RANK else None

    def kinds(self) -> list[str]:
        """The snapshot kinds published so far."""
        with self._lock:
            return [] if self._slot is None else [RANK]

    def metrics_since(self, cursor: int = 0) -> tuple[list[dict[str, Any]], int]:
        """New metric records of every member since ``cursor`` (see :class:`MemberRecords`)."""
        return self._records.since(cursor)

    # -- the training thread ----------------------------------------------------------------------------------
    def _main(self) -> None:
        try:
            statuses = train_sweep(self.plan, self.run, self.runs, progress=self.progress, callbacks=[_Driver(self)])
        except BaseException as err:  # the members are already recorded as "failed" by train_sweep
            self.error = err
            self._write_status(RunState.FAILED, f"{type(err).__name__}: {err}", [r.read_status() for r in self.runs],
                               traceback=traceback.format_exc(limit=20))
            return
        states = [s["state"] for s in statuses]
        diverged = states.count(RunState.DIVERGED)
        if diverged == len(states):
            state, message = RunState.DIVERGED, "every member diverged"
        else:
            state = RunState.STOPPED if RunState.STOPPED in states else RunState.COMPLETED
            message = f"{state}; {diverged} of {len(states)} members diverged" if diverged else state
        self._write_status(state, message, statuses)

    def _members(self, state: str) -> list[dict[str, Any]]:
        """Each member's status entry during training; live members take the job's ``state``."""
        out = []
        for m, run in zip(self._ensemble.members, self.runs, strict=True):
            entry = {"name": self.member_names[m.index], "run": run.id, "state": state, "message": "",
                     "step": m.step, "metrics": m.last_eval}
            if m.diverged is not None:
                entry.update(state=RunState.DIVERGED, message=str(m.diverged), step=m.diverged.step)
            elif m.ended:
                entry["state"] = end_state(m.step, m.total_steps)[0]
            out.append(entry)
        return out

    def _write_status(self, state: str, message: str, statuses: list[dict[str, Any]] | None = None,
                      **extra: Any) -> None:
        """Rewrite the sweep folder's status.json; ``statuses`` are the members' own, once training is over."""
        ensemble = self._ensemble
        if statuses is not None:
            members = [{"name": name, "run": run.id, "state": s["state"], "message": s.get("message", ""),
                        "step": s.get("step", 0), "metrics": s.get("metrics", {})}
                       for name, run, s in zip(self.member_names, self.runs, statuses, strict=True)]
        elif ensemble is not None:
            members = self._members(state)
        else:
            members = [{"name": name, "run": run.id, "state": state, "message": "", "step": 0, "metrics": {}}
                       for name, run in zip(self.member_names, self.runs, strict=True)]
        fields = {} if ensemble is None else {"step": ensemble.step, "epoch": ensemble.epoch,
                                              "total_steps": ensemble.total_steps}
        self.run.write_status(state, message, **fields, members=members, **extra)
        self._last_beat = time.monotonic()

    def _report_ended(self) -> None:
        """Write a newly diverged member's final status into its folder now, not when the ensemble ends."""
        fresh = [m for m in self._ensemble.members if m.diverged is not None and m.index not in self._reported]
        for m in fresh:
            self._reported.add(m.index)
            final_status(self.runs[m.index], m)
        if fresh:
            self._write_status(RunState.RUNNING, f"{len(self._reported)} member(s) diverged; the others go on")

    def _member_status(self, state: str, message: str) -> None:
        for m in self._ensemble.live:
            self.runs[m.index].write_status(state, message, step=m.step, epoch=m.epoch, total_steps=m.total_steps,
                                            metrics=m.last_eval)

    def _control(self, stepped: bool) -> None:
        """Stop, pause and single steps, by the in-process jobs' one mechanism (the paused snapshot is the paused
        model); ``stepped``: called after a step (which uses up one of :meth:`step`'s budget), not before the
        first."""
        ensemble = self._ensemble

        def paused() -> None:
            self._publish(force=True)
            message = f"paused at step {ensemble.step}"
            self._member_status(RunState.PAUSED, message)  # members first: the sweep is paused once each of them is
            self._write_status(RunState.PAUSED, message)

        def resumed() -> None:
            message = f"resumed at step {ensemble.step}"
            self._write_status(RunState.RUNNING, message)
            self._member_status(RunState.RUNNING, message)

        if self._between_steps(stepped=stepped, paused=paused, resumed=resumed):
            ensemble.should_stop = True

    def _publish(self, force: bool = False) -> None:
        """Build a rank snapshot if one is due by the cadence or forced, unless the newest snapshot shows this very
        state; the next snapshot's seconds count from the end of this build."""
        ensemble = self._ensemble
        if not self.cadence.due(RANK, ensemble.step, force=force):
            return
        state = (ensemble.step, self._evals, sum(m.ended for m in ensemble.members))
        if state == self._snapshot_state:
            return  # the newest snapshot already shows exactly this
        snapshot = Snapshot(RANK, self._snapshot())
        self.cadence.built(RANK, ensemble.step)
        self._snapshot_state = state
        with self._lock:
            version = 1 if self._slot is None else self._slot[0] + 1
            self._slot = (version, snapshot)
        self._landed()

    def _snapshot(self) -> dict[str, np.ndarray]:
        ensemble = self._ensemble
        members = ensemble.members
        if self._models is None:
            self._models = [ensemble.member_model(m.index) for m in members]
        else:
            for m, model in zip(members, self._models, strict=True):
                model.load_state_dict(ensemble.member_state_dict(m.index)["model"])
        return rank_snapshot(self._models, ensemble.data, names=self.member_names, points=self.points, ridge=self.ridge,
                          diverged=[m.diverged is not None for m in members],
                          evals=[(m.last_eval, m.last_eval_step) for m in members], step=ensemble.step,
                          task=ensemble.task)

