"""Continuing a run, without losing any of it: which folder, from which checkpoint, with which changed settings.

A run folder is written only by its own run. ``lab resume RUN`` therefore accepts a run id inside the runs folder
or the path of a folder that holds a valid run (a readable, valid ``config.json`` and a known state), and refuses
anything else before writing a byte. It continues from ``checkpoints/last.pt``; without one (or with a corrupt
one) it refuses and offers the two ways on: ``--checkpoint best`` (continue from ``best.pt``) or ``--restart``
(train again from step 0, the earlier attempt kept under ``history/``). Records after the checkpoint's step are
set aside under ``history/``, never deleted (:meth:`~lab.runs.store.Run.rewind_metrics`).

Settings a resume may change are those of optimisation and bookkeeping (:data:`RESUME_KEYS`): a diverged run
continues from its last finite checkpoint with a lower ``train.lr``. The change is saved in the run's
``config.json`` (``resume_changes``: step, overrides, time) beside the config it produced.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.config import ConfigError, ExperimentConfig, apply_overrides, from_dict, parse_override, to_dict
from lab.runfolder import layout
from lab.runfolder.layout import Checkpoint
from lab.runs.catalog import checkpoint_step, irregular_entries, linked_entries
from lab.runs.store import STATES, CheckpointError, Run, RunFolderError, RunStore, sanitize_name
from lab.train.checkpoint import load_checkpoint

# what a resume may change: the optimisation's pace and length and the run's bookkeeping, never the model, the
# data, the batch or the seeds (the steps already taken would not be those of the config)
RESUME_KEYS = ("train.lr", "train.min_lr", "train.epochs", "train.max_steps", "train.eval_every", "train.log_every",
               "train.checkpoint_every", "train.probe_every", "train.device", "train.threads", "data.workers")
SOURCES = (Checkpoint.LAST, Checkpoint.BEST, "restart")


class ResumeRefused(ValueError):
    """The run cannot be resumed as asked; nothing was written. The message says why and what would work."""


def find_run(arg: str, store: RunStore) -> Run:
    """The run ``arg`` names: a run id inside ``store``'s folder, else a path (absolute, or relative to the current
    folder) of a valid run folder.

    Raises:
        RunFolderError: no such run, or the folder holds no valid run (:func:`check_run`); nothing was written.
    """
    if sanitize_name(arg) == arg and (store.root / arg).is_dir():
        run = store.open(arg)
    else:
        path = Path(arg)
        if not path.is_dir():
            raise RunFolderError(f"no run {arg!r}: not a run id in {store.root} and not a folder")
        run = Run(path)
    check_run(run)
    return run


def check_run(run: Run) -> ExperimentConfig:
    """The config of ``run``, after checking that the folder holds a run: ``config.json`` readable and valid, and
    ``status.json`` in a known state.

    Raises:
        RunFolderError: what is missing or wrong (the folder is left as it is).
    """
    check_entries(run.path)
    try:
        cfg = from_dict(ExperimentConfig, run.config_record()["config"])
    except ConfigError as err:
        raise RunFolderError(f"{run.path}/config.json does not hold a valid config: {err}") from None
    state = run.read_status().get("state")
    if state not in STATES:
        raise RunFolderError(f"{run.path} has no readable status.json (state {state!r}): not a run folder the lab "
                             "wrote, or a damaged one")
    return cfg


def check_entries(path: Path) -> None:
    """Refuse a run folder the lab would have to follow a link, block on a pipe or append to a folder to train or
    read: ``path`` itself a link, a link among its entries, or an entry of the wrong kind
    (:func:`~lab.runs.catalog.irregular_entries`). Checked before anything is written, so a refused run keeps its
    state and its files.

    Raises:
        RunFolderError: the first such problem, naming the entries.
    """
    if path.is_symlink():
        raise RunFolderError(f"{path} is a symbolic link; name the run folder itself")
    linked = linked_entries(path) + [name for name in (layout.HISTORY, layout.ANALYSIS, layout.PROCESS_LOG)
                                     if (path / name).is_symlink()]
    if linked:
        raise RunFolderError(f"{path} holds symbolic links ({', '.join(linked)}), which the lab never follows "
                             "or writes through: replace them with the files themselves; nothing was written")
    irregular = irregular_entries(path)
    if irregular:
        raise RunFolderError(f"{path} holds entries that are not what the lab writes ({', '.join(irregular)}): a "
                             "named pipe would block the run and a folder cannot be appended to; replace them with "
                             "the files or folders themselves (or move them away); nothing was written")


def resume_overrides(cfg: ExperimentConfig, overrides: Iterable[str]) -> tuple[ExperimentConfig, dict[str, Any]]:
    """``cfg`` with resume ``overrides`` (``train.lr=0.001``) applied, and the changes made.

    Raises:
        ResumeRefused: a key outside :data:`RESUME_KEYS`. ConfigError: a bad value.
    """
    values = dict(parse_override(text) for text in overrides)
    refused = [k for k in values if k not in RESUME_KEYS]
    if refused:
        raise ResumeRefused(f"{refused[0]} cannot change on resume (the steps taken would not be those of the new "
                            f"config); a resume may change {', '.join(RESUME_KEYS)}. Train a new run instead.")
    new = apply_overrides(cfg, values)
    old, now = to_dict(cfg), to_dict(new)
    changes = {}
    for key in values:
        section, name = key.split(".")
        if old[section][name] != now[section][name]:
            changes[key] = {"from": old[section][name], "to": now[section][name]}
    return new, changes


@dataclass(frozen=True)
class ResumePlan:
    """How a run continues. ``source``: ``last``, ``best`` or ``restart``; ``step``: the checkpoint's step (0 for a
    restart); ``changes``: settings changed by this resume (key → from/to)."""

    source: str
    step: int
    changes: dict[str, Any]

    def record(self) -> dict[str, Any]:
        """The entry for config.json's ``resume_changes``."""
        return {"step": self.step, "source": self.source, "changes": self.changes, "time": time.time()}


def plan_resume(run: Run, source: str = Checkpoint.LAST, changes: dict[str, Any] | None = None) -> ResumePlan:
    """Check that ``run`` can continue from ``source`` before anything is written.

    Raises:
        ResumeRefused: the checkpoint is missing or unreadable; the message offers what exists (``--checkpoint
            best`` when best.pt is readable, ``--restart`` always).
    """
    if source not in SOURCES:
        raise ValueError(f"unknown resume source {source!r}; valid: {', '.join(SOURCES)}")
    if source == "restart":
        return ResumePlan("restart", 0, changes or {})
    path = run.checkpoint_path(source)
    step = checkpoint_step(path)
    if step is None:
        problem = "is missing" if not path.exists() else "cannot be read (corrupt, a link or not a checkpoint)"
        offers = []
        best = checkpoint_step(run.checkpoint_path(Checkpoint.BEST)) if source != Checkpoint.BEST else None
        if best is not None:
            offers.append(f"--checkpoint best (continue from best.pt, step {best})")
        offers.append("--restart (train again from step 0; everything recorded so far is kept under history/)")
        raise ResumeRefused(f"{path} {problem}, so {run.id} cannot continue from it; nothing was written. Resume "
                            f"with {' or '.join(offers)}.")
    return ResumePlan(source, step, changes or {})


def load_resume_state(run: Run, plan: ResumePlan, map_location: Any = "cpu") -> dict[str, Any] | None:
    """The trainer state to continue from (None for a restart).

    Raises:
        ResumeRefused: the checkpoint could not be loaded after all (it changed since :func:`plan_resume`).
    """
    if plan.source == "restart":
        return None
    try:
        return load_checkpoint(run, plan.source, map_location=map_location)
    except CheckpointError as err:
        raise ResumeRefused(f"{err}; nothing was written. Resume with --checkpoint best or --restart.") from None
