"""The names inside a run folder: the one table every reader and writer of a run folder uses.

A run folder holds (sub-folders end in ``/``):

==========================  ======================================  ==================================================
entry                       written by                              contents
==========================  ======================================  ==================================================
``config.json``             the runner, first                       resolved config, package versions, git commit,
                                                                    ``resume_changes``
``config.yaml``             :class:`~lab.jobs.process.ProcessJob`   the config its child process trains
``status.json``             recorder, jobs, runner                  state, message, step, epoch, heartbeat (atomic)
``metrics.jsonl``           :class:`~.RunRecorder`                  one JSON record per line, appended and flushed
``snapshots/``              publishers                              ``<kind>-<step, 9 digits>.npz`` snapshots
``checkpoints/``            the recorder                            ``last.pt``, ``best.pt``, ``step-<step, 9
                                                                    digits>.pt`` (``train.save_every``)
``figures/``                the runner (loader engine)              ``<kind>-<step, 9 digits>.<ext>``: kinds
                                                                    ``reconstruction``, ``samples`` (PNG), ``probe``
                                                                    (JSON)
``analysis/``               ``lab analyze``, ``probe``,             ``alignment.json``/``.npz``, ``probe.json``,
                            ``sample``, ``fid``                     ``diffusion_probe.json``, ``fid.json``,
                                                                    ``samples-…``, cached ``features-…``
``history/``                a resume                                what it set aside; nothing is ever deleted
``events.out.tfevents.*``   the recorder                            TensorBoard scalars
``process.log``             :class:`~lab.jobs.process.ProcessJob`   the child's stdout and stderr
``failed-rank<r>.txt``      a ``torchrun`` process other than       its traceback
                            rank 0 that failed
``lock``                    the runner (rank 0)                     host and pid of the process training the run
``STOP``                    anyone                                  asks the run to stop after its current step
``sweep.json``              :mod:`lab.sweeps` (a sweep's folder)    the members of a sweep, in a folder of run folders
``jobs/``                   :mod:`lab.jobs.submit` (a sweep's       submitit's submissions and each job's logs
                            folder, a reproduction's)
``reproduce.json``          :mod:`lab.reproduce.launch` (a          a full-scale reproduction's plan and its runs'
                            reproduction's folder)                  states; its run folders are under ``runs/``
``throughput.jsonl``        ``lab throughput --record`` (a runs     measured training throughput, one record per line
                            folder)                                 (:mod:`lab.reproduce.estimate`)
``latents.json``            :mod:`lab.data.latents` (a latent       the index of a folder of VAE latents
                            folder)
==========================  ======================================  ==================================================
"""

from __future__ import annotations

from enum import StrEnum

CONFIG = "config.json"
CONFIG_YAML = "config.yaml"
STATUS = "status.json"
METRICS = "metrics.jsonl"
SNAPSHOTS = "snapshots"
CHECKPOINTS = "checkpoints"
FIGURES = "figures"
ANALYSIS = "analysis"
HISTORY = "history"
TFEVENTS_PREFIX = "events.out.tfevents."
PROCESS_LOG = "process.log"
LOCK = "lock"
STOP = "STOP"
SWEEP = "sweep.json"
JOBS = "jobs"
REPRODUCTION = "reproduce.json"
REPRODUCTION_RUNS = "runs"
"""A full-scale reproduction's folder: its plan, and the folder of its run folders."""
THROUGHPUT = "throughput.jsonl"
"""A runs folder's throughput measurements, which a full-scale plan's GPU-hour estimates read."""
LATENTS_INDEX = "latents.json"
"""A latent folder's index (:mod:`lab.data.latents`)."""

#: The sub-folders a new run folder starts with.
FOLDERS = (SNAPSHOTS, CHECKPOINTS)
#: What a restart keeps in place (everything else moves under ``history/restart-<time>/``).
KEPT_ON_RESTART = (CONFIG, HISTORY, LOCK)

# -- inside analysis/ ------------------------------------------------------------------------------------------------
ALIGNMENT = "alignment.json"
"""``lab analyze alignment``: RA1–RA4 and NC1–NC4 summaries (:mod:`lab.reports.alignment`)."""
ALIGNMENT_ARRAYS = "alignment.npz"
"""The same analysis's arrays."""
RETRANSFORMATION = "retransformation.json"
"""``lab analyze retransformation``: each residual step's distance to the input and to the step before, and CKA
between layers (:mod:`lab.reports.retransformation`)."""
LAYER_RANK = "layer_rank.json"
"""``lab analyze rank``: feature rank (the paper's Eq. 6 and Roy & Vetterli's) and a ridge probe's accuracy at every
layer (:mod:`lab.reports.layer_rank`)."""
COLLAPSE = "collapse.json"
"""``lab analyze collapse``: NC1–NC4 of the last layer at every kept checkpoint, over training
(:mod:`lab.reports.alignment`)."""
PROBE = "probe.json"
"""``lab probe``: the linear probe of a classifier's or an MAE's frozen features (:mod:`lab.reports.probe`)."""
DIFFUSION_PROBE = "diffusion_probe.json"
"""``lab probe`` of a diffusion run: probes over (block, noise level) (:mod:`lab.reports.diffusion_probe`)."""
FID = "fid.json"
"""``lab fid``: every FID or digits-FD measurement of the run, appended (:mod:`lab.reports.fid`)."""

# -- inside figures/ -------------------------------------------------------------------------------------------------
RECONSTRUCTION, SAMPLES, PROBE_FIGURE = "reconstruction", "samples", "probe"
"""The kinds of evaluation figure the loader engine writes (``probe``: a JSON record, not a picture)."""


def figure_name(kind: str, step: int, suffix: str = ".png") -> str:
    """``<kind>-<step, 9 digits><suffix>``, an evaluation figure's name inside ``figures/``."""
    return f"{kind}-{step:09d}{suffix}"


def samples_name(step: int, settings: str, suffix: str) -> str:
    """``samples-<step>-<settings><suffix>`` inside ``analysis/``: the grid and arrays ``lab sample`` drew."""
    return f"{SAMPLES}-{step}-{settings}{suffix}"


def features_name(layer: str, step: int) -> str:
    """``features-<layer>-<step>.pt`` inside ``analysis/``: the frozen features a probe cached."""
    return f"features-{layer}-{step}.pt"


# -- inside snapshots/ ----------------------------------------------------------------------------------------------
SNAPSHOT_SUFFIX = ".npz"


def snapshot_name(kind: str, version: int) -> str:
    """``<kind>-<version, 9 digits>.npz`` inside ``snapshots/``: one published snapshot (``kind`` already a safe
    name)."""
    return f"{kind}-{version:09d}{SNAPSHOT_SUFFIX}"


def snapshot_version(kind: str, name: str) -> int | None:
    """The version a file named ``name`` holds of ``kind`` (the inverse of :func:`snapshot_name`); None when it is
    not a snapshot of ``kind``."""
    prefix = f"{kind}-"
    digits = name[len(prefix):-len(SNAPSHOT_SUFFIX)]
    named = name.startswith(prefix) and name.endswith(SNAPSHOT_SUFFIX)
    return int(digits) if named and digits.isascii() and digits.isdigit() else None


# -- inside checkpoints/ --------------------------------------------------------------------------------------------
CHECKPOINT_SUFFIX = ".pt"
SAVED_PREFIX = "step-"
"""The name of a checkpoint kept at a step (``train.save_every``): ``step-<step, 9 digits>``."""


def checkpoint_name(name: str) -> str:
    """``<name>.pt`` inside ``checkpoints/``: the file of the checkpoint ``name`` (a :class:`Checkpoint` or a
    :func:`saved_name`, already a safe name)."""
    return f"{name}{CHECKPOINT_SUFFIX}"


def saved_name(step: int) -> str:
    """``step-<step, 9 digits>``: the checkpoint name of the weights kept at ``step``."""
    return f"{SAVED_PREFIX}{step:09d}"


class Checkpoint(StrEnum):
    """The checkpoints ``checkpoints/`` keeps (``<name>.pt``) besides the ones saved at chosen steps. A member
    compares equal to its string, as a command line or a config holds it."""

    LAST = "last"
    """The newest state, written at most every ``CHECKPOINT_S`` seconds and at the end: what a resume continues."""
    BEST = "best"
    """The state of the best evaluation so far (``best_acc``)."""


def restarted_name(stamp: str) -> str:
    """``restart-<time>`` inside ``history/``: what a restart set aside."""
    return f"restart-{stamp}"


def replaced_checkpoint_name(step: int) -> str:
    """``last-before-step-<step>.pt`` inside ``history/``: a ``last`` checkpoint a resume from an earlier one set
    aside."""
    return f"last-before-step-{step}.pt"


def failed_rank_name(rank: int | str) -> str:
    """``failed-rank<rank>.txt``: the traceback of a ``torchrun`` process other than rank 0 that failed (``"*"`` as
    ``rank`` makes the pattern of them all)."""
    return f"failed-rank{rank}.txt"


def metrics_history_name(stamp: str) -> str:
    """``metrics-<time>.jsonl`` inside ``history/``: ``metrics.jsonl`` as it was before a resume rewound it."""
    return f"metrics-{stamp}.jsonl"


# -- in status.json --------------------------------------------------------------------------------------------------
class RunState(StrEnum):
    """``status.json``'s ``state``: where a run is. A member compares equal to its string, as JSON holds it."""

    QUEUED = "queued"
    """Made, waiting for its job (a sweep's member, a cluster job, a process starting)."""
    RUNNING = "running"
    PAUSED = "paused"
    """Its job holds it between steps, to go on when told."""
    COMPLETED = "completed"
    STOPPED = "stopped"
    """Stopped on request (STOP, SIGTERM, a preemption) with a checkpoint: ``lab resume`` continues it."""
    DIVERGED = "diverged"
    """A non-finite loss or metric ended it."""
    FAILED = "failed"
    """An error ended it (the message and traceback say which)."""


FINISHED = (RunState.COMPLETED, RunState.STOPPED, RunState.DIVERGED, RunState.FAILED)
"""The states a run ends in."""
ALIVE = (RunState.QUEUED, RunState.RUNNING, RunState.PAUSED)
"""The states of a run that some job holds."""


class LedgerState(StrEnum):
    """``reproduce.json``'s states of a run that are not a run folder's (:class:`RunState`): what the launcher last saw
    of a run without a folder state to show."""

    PLANNED = "planned"
    """Not started yet."""
    BUSY = "busy"
    """Trained by another process (its run lock is held), or its cluster job is still queued or running."""
    SUBMITTED = "submitted"
    """Sent to the cluster; its run folder says how far it is."""
    STEP_FAILED = "step failed"
    """The run completed, a step on its folder (an analysis) failed."""
