"""The run store: one folder per run, the contract between jobs (which write) and views (which read).

Its entries and who writes each are the table of :mod:`lab.runfolder.layout`. No metric, checkpoint or config is ever
deleted: what a resume sets aside goes under ``history/`` (the views' snapshots alone are thinned,
:meth:`Run.prune_snapshots`). Reading and listing run folders needs neither torch nor the models: checkpoints are
written and loaded by training (:mod:`lab.train.checkpoint`), a run's config is made an experiment config by
:func:`lab.config.config_of_run`, and a plain entry of a checkpoint (its ``step``) is read without torch
(:func:`~lab.runfolder.entries.checkpoint_field`).

Readers are forgiving: a half-written last line of ``metrics.jsonl`` is skipped until it is complete, and a
missing or unreadable ``status.json`` reads as state ``unknown``. Every entry is read as untrusted input through
:mod:`lab.runfolder.entries` (regular files only, never through a symbolic link, sizes capped, snapshots checked
before they are loaded). Everything the lab writes as JSON is strict JSON: a
non-finite number is written as ``null`` and named, with its value, under ``nonfinite``. A :class:`RunStore` never
writes outside its runs folder: run ids are sanitised and every path is checked to resolve inside it (a run named by
its path, ``lab resume PATH``, is written where it lies once it has been checked to hold a valid run).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from lab.runfolder import layout
from lab.runfolder.entries import LIMITS, open_entry, read_bytes, read_json, read_jsonl, read_npz
from lab.runfolder.layout import Checkpoint
from lab.runfolder.writes import atomic_write_bytes, atomic_write_json, json_text, open_append

STATES = tuple(layout.RunState)
FINISHED = layout.FINISHED
_PACKAGES = ("torch", "numpy", "timm", "panel", "holoviews", "bokeh", "residual-lab")


def end_state(step: int, total_steps: int) -> tuple[layout.RunState, str]:
    """``(state, message)`` of a run that ended at ``step`` without diverging: ``completed`` when it trained all
    ``total_steps``, ``stopped`` before that."""
    if step >= total_steps:
        return layout.RunState.COMPLETED, f"completed {step} steps"
    return layout.RunState.STOPPED, f"stopped at step {step}"


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, truncated or not a checkpoint; the message names the file."""


class RunFolderError(ValueError):
    """A folder is not a readable run folder (no or corrupt config.json); the message says what is wrong."""


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


def default_runs_dir() -> Path:
    """``$LAB_RUNS_DIR`` if set, else ``./runs``."""
    return Path(os.environ.get("LAB_RUNS_DIR", "runs"))


def sanitize_name(name: str) -> str:
    """A name safe as one path component: letters, digits, ``-``, ``_``, ``.``; at most 48 characters."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")
    return cleaned[:48] or "run"


def environment_info() -> dict[str, Any]:
    """Package versions and the git commit of the working directory, when available."""
    versions = {}
    for name in _PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    commit = None
    with contextlib.suppress(Exception):
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        commit = out.stdout.strip() or None if out.returncode == 0 else None
    return {"versions": versions, "git_commit": commit}


ERROR_CHARS = 600
"""The most characters of an exception's message a run's status quotes (a registry's list of names, a long path):
the status line stays readable, and the traceback beside it has the rest."""


def error_text(err: BaseException, chars: int = ERROR_CHARS) -> str:
    """``"Type: message"`` of ``err``, its message cut to ``chars`` characters with how many more it had."""
    message = str(err)
    if len(message) > chars:
        message = f"{message[:chars]} … ({len(message) - chars:,} more characters)"
    return f"{type(err).__name__}: {message}" if message else type(err).__name__


@dataclass(frozen=True)
class Run:
    """One run folder. Cheap to create; every method reads or writes the disk."""

    path: Path

    @property
    def id(self) -> str:
        return self.path.name

    # -- config -----------------------------------------------------------------------------------------------
    def write_config(self, config: dict[str, Any], **extra: Any) -> None:
        """Save the resolved config with package versions and git commit (and any extra fields)."""
        atomic_write_json(self.path / layout.CONFIG, {"config": config, **environment_info(), **extra})

    def read_config(self) -> dict[str, Any]:
        """The ``config`` section of config.json (``{}`` if missing or unreadable: for views)."""
        with contextlib.suppress(RunFolderError):
            return self.config_record()["config"]
        return {}

    def config_record(self) -> dict[str, Any]:
        """The whole of config.json (``config``, versions, commit, ``resume_changes``, …), for what must not guess.

        Raises:
            RunFolderError: config.json is missing, a link, unreadable, not JSON, or holds no ``config`` mapping.
        """
        path = self.path / layout.CONFIG
        try:
            record = read_json(path, LIMITS[layout.CONFIG])
        except FileNotFoundError:
            raise RunFolderError(f"{self.path} has no config.json: not a run folder, or one whose config was "
                                 "never written") from None
        except (OSError, ValueError) as err:  # a link, a pipe, too large, unreadable, not JSON
            raise RunFolderError(f"{path} cannot be read as JSON: {err}") from None
        if not isinstance(record, dict) or not isinstance(record.get("config"), dict):
            raise RunFolderError(f"{path} holds no config section")
        return record

    def add_resume_change(self, config: dict[str, Any], change: dict[str, Any]) -> None:
        """Save ``config`` as the run's config, recording ``change`` (step, overrides, time, …) under
        ``resume_changes``: the settings a resume changed stay named beside the config they produced."""
        record = self.config_record()
        record["config"] = config
        record["resume_changes"] = [*record.get("resume_changes", []), change]
        atomic_write_json(self.path / layout.CONFIG, record)

    # -- status -----------------------------------------------------------------------------------------------
    def write_status(self, state: layout.RunState | str, message: str = "", **fields: Any) -> dict[str, Any]:
        """Atomically replace status.json; ``fields`` carries step, epoch, total_steps, … .

        Raises:
            ValueError: ``state`` is not a :class:`~lab.runfolder.layout.RunState`.
        """
        if state not in STATES:
            raise ValueError(f"unknown run state {state!r}; valid: {', '.join(STATES)}")
        status = {"state": layout.RunState(state), "message": message, "heartbeat": time.time(), **fields}
        atomic_write_json(self.path / layout.STATUS, status)
        return status

    def read_status(self) -> dict[str, Any]:
        """status.json, or ``{"state": "unknown", ...}`` when missing or unreadable (an older or foreign run)."""
        try:
            status = read_json(self.path / layout.STATUS, LIMITS[layout.STATUS])
            return status if isinstance(status, dict) and "state" in status else {"state": "unknown", "message": ""}
        except (OSError, ValueError):  # missing, a link, a pipe, too large, unreadable, not JSON
            return {"state": "unknown", "message": "no readable status.json"}

    # -- metrics ----------------------------------------------------------------------------------------------
    def append_metrics(self, *records: dict[str, Any]) -> None:
        """Append records to metrics.jsonl, one line each, flushed (never through a link or into a pipe:
        :func:`open_append`)."""
        text = "".join(json_text(r) + "\n" for r in records)
        with os.fdopen(open_append(self.path / layout.METRICS), "a") as f:
            f.write(text)
            f.flush()

    def read_metrics(self, cursor: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Records written since byte offset ``cursor`` (at most :data:`~lab.runfolder.entries.METRICS_CHUNK` bytes
        of them: call again from the new cursor for the rest), and the new cursor
        (:func:`~lab.runfolder.entries.read_jsonl`; a missing file, a link, a pipe or an unreadable one has none)."""
        try:
            lines = read_jsonl(self.path / layout.METRICS, cursor)
        except OSError:
            return [], cursor
        return lines.records, lines.cursor

    def metric_records(self) -> list[dict[str, Any]]:
        """Every complete record of metrics.jsonl (for reports and resumes of a run: the whole file, read a chunk at
        a time)."""
        records, cursor = [], 0
        while True:
            try:
                lines = read_jsonl(self.path / layout.METRICS, cursor)
            except OSError:
                return records
            records += lines.records
            cursor = lines.cursor
            if not lines.more:
                return records

    def rewind_metrics(self, step: int) -> Path | None:
        """Continue the metrics from ``step``: records after it (and a torn last line) leave metrics.jsonl, which a
        resumed run then extends without duplicates. Nothing is lost: when anything would go, the whole file as it
        was is first copied to ``history/metrics-<time>.jsonl``.

        Returns:
            The copy set aside, or None when nothing was after ``step``.
        """
        path = self.path / layout.METRICS
        try:
            fd, st = open_entry(path)
        except FileNotFoundError:
            return None
        os.close(fd)
        data = read_bytes(path, st.st_size)
        records, cursor, bad, torn = [], 0, 0, False
        while cursor < len(data):
            lines = read_jsonl(path, cursor)
            records, cursor, bad, torn = records + lines.records, lines.cursor, bad + lines.bad, lines.torn
            if not lines.more:
                break
        keep = [r for r in records if _number_at_most(r.get("step", 0), step)]
        if len(keep) == len(records) and not torn and not bad:
            return None
        aside = self.history_path(layout.metrics_history_name(_stamp()))
        atomic_write_bytes(aside, data, durable=True)
        atomic_write_bytes(path, "".join(json_text(r) + "\n" for r in keep).encode(), durable=True)
        return aside

    def history_path(self, name: str) -> Path:
        """A new path under ``history/`` (suffixed ``-2``, ``-3`` … if taken): where a resume sets things aside."""
        folder = self.path / layout.HISTORY
        if folder.is_symlink():
            raise RunFolderError(f"{folder} is a symbolic link: nothing is written through it")
        folder.mkdir(exist_ok=True)
        stem, dot, ext = name.partition(".")
        for k in range(1, 10_000):
            path = folder / (name if k == 1 else f"{stem}-{k}{dot}{ext}")
            if not os.path.lexists(path):
                return path
        raise RuntimeError(f"history/ of {self.path} is full")

    def set_aside(self) -> Path:
        """Move everything a run recorded (metrics, status, checkpoints, snapshots, figures, analyses, TensorBoard
        events) to ``history/restart-<time>/``, keeping config.json and the history: a restart begins anew with
        nothing lost."""
        aside = self.history_path(layout.restarted_name(_stamp()))
        aside.mkdir()
        for entry in sorted(self.path.iterdir()):
            if entry.name not in layout.KEPT_ON_RESTART and not entry.name.startswith(".lock"):
                os.replace(entry, aside / entry.name)
        for sub in layout.FOLDERS:
            (self.path / sub).mkdir()
        return aside

    # -- checkpoints ------------------------------------------------------------------------------------------
    def checkpoint_path(self, name: str = Checkpoint.LAST) -> Path:
        """``checkpoints/<name>.pt`` (written and loaded by :mod:`lab.train.checkpoint`)."""
        return self.path / layout.CHECKPOINTS / layout.checkpoint_name(sanitize_name(name))

    def has_checkpoint(self, name: str = Checkpoint.LAST) -> bool:
        return self.checkpoint_path(name).is_file()

    def saved_checkpoints(self) -> list[str]:
        """The names of the checkpoints kept every ``train.save_every`` steps (``step-<9 digits>``), by step; links
        are never listed."""
        folder = self.path / layout.CHECKPOINTS
        if folder.is_symlink():
            return []
        return sorted(p.stem for p in folder.glob(layout.checkpoint_name(f"{layout.SAVED_PREFIX}*"))
                      if p.stem[len(layout.SAVED_PREFIX):].isdigit() and not p.is_symlink())

    # -- figures and analyses -------------------------------------------------------------------------------
    def figure_path(self, kind: str, step: int, suffix: str = ".png") -> Path:
        """Where the evaluation figure ``kind`` of ``step`` goes (:func:`~lab.runfolder.layout.figure_name`)."""
        return self.path / layout.FIGURES / layout.figure_name(kind, step, suffix)

    def analysis_path(self, name: str) -> Path:
        """``analysis/<name>`` (a name of :mod:`~lab.runfolder.layout`); the writer makes the folder."""
        return self.path / layout.ANALYSIS / name

    def figures(self, kind: str, suffix: str = ".png") -> list[tuple[int, Path]]:
        """``(step, path)`` of the evaluation figures ``figures/<kind>-<step>.<suffix>`` (``samples``, ``probe``
        with ``.json``, ``reconstruction``), by step. Links are never listed (nor a linked folder read): they could
        lead outside the folders a server may read."""
        folder = self.path / layout.FIGURES
        if folder.is_symlink():
            return []
        found = []
        for p in folder.glob(f"{kind}-*{suffix}"):
            step = p.name[len(kind) + 1:-len(suffix)]
            if step.isdigit() and not p.is_symlink():
                found.append((int(step), p))
        return sorted(found)

    # -- snapshots --------------------------------------------------------------------------------------------
    def save_snapshot(self, kind: str, version: int, arrays: dict[str, np.ndarray]) -> Path:
        """Write ``snapshots/<kind>-<version>.npz`` atomically."""
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        path = self.path / layout.SNAPSHOTS / layout.snapshot_name(sanitize_name(kind), version)
        atomic_write_bytes(path, buffer.getvalue())
        return path

    def snapshot_versions(self, kind: str) -> list[int]:
        """Versions of ``kind`` on disk, ascending."""
        kind = sanitize_name(kind)
        folder = self.path / layout.SNAPSHOTS
        if folder.is_symlink():  # never followed: it could lead anywhere
            return []
        versions = ((layout.snapshot_version(kind, p.name), p) for p in folder.glob(f"{kind}-*"))
        return sorted(v for v, p in versions if v is not None and not p.is_symlink())

    def load_snapshot(self, kind: str, version: int | None = None) -> tuple[int, dict[str, np.ndarray]] | None:
        """``(version, arrays)`` of the given snapshot of ``kind``, or of the latest readable one (of the newest
        three: one being replaced, or a damaged one, gives way to the one before); None if there is none.

        Arrays come back as stored (large float arrays as float16; :func:`lab.snapshots.snapshot.load_saved` gives the
        snapshot, widened, that the views draw); every
        snapshot is checked before it is loaded (:func:`~lab.runfolder.entries.read_npz`).

        Raises:
            EntryError: the given ``version`` cannot be read (the message says why).
        """
        folder = self.path / layout.SNAPSHOTS
        if folder.is_symlink():  # never followed: it could lead anywhere
            return None
        if version is not None:
            try:
                return version, read_npz(folder / layout.snapshot_name(sanitize_name(kind), version))
            except FileNotFoundError:
                return None
        for v in reversed(self.snapshot_versions(kind)[-3:]):
            with contextlib.suppress(OSError):
                return v, read_npz(folder / layout.snapshot_name(sanitize_name(kind), v))
        return None

    def prune_snapshots(self, kind: str, keep_last: int = 5, keep_history: int = 50) -> None:
        """Bound disk use: keep the newest ``keep_last`` and at most ``keep_history`` older ones, evenly thinned."""
        versions = self.snapshot_versions(kind)
        older = versions[:-keep_last] if keep_last else versions
        if len(older) <= keep_history:
            return
        keep = set(np.linspace(0, len(older) - 1, keep_history).round().astype(int).tolist())
        for i, v in enumerate(older):
            if i not in keep:
                with contextlib.suppress(FileNotFoundError):
                    (self.path / layout.SNAPSHOTS / layout.snapshot_name(sanitize_name(kind), v)).unlink()


def _number_at_most(value: Any, bound: float) -> bool:
    """Whether ``value`` is a number no greater than ``bound`` (a record's step; anything else is not kept)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value <= bound


class RunStore:
    """The runs folder: creates run folders with safe unique ids and finds them again."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_runs_dir()

    def _inside(self, path: Path) -> Path:
        root = self.root.resolve()
        resolved = path.resolve()
        if resolved != root and root not in resolved.parents:
            raise ValueError(f"{path} is outside the runs folder {root}")
        return path

    def create(self, name: str = "run") -> Run:
        """A new run folder ``<root>/<YYYYmmdd-HHMMSS>-<sanitised name>`` (suffixed ``-2``, ``-3`` if taken)."""
        base = f"{_stamp()}-{sanitize_name(name)}"
        self.root.mkdir(parents=True, exist_ok=True)
        for k in range(1, 10_000):
            path = self._inside(self.root / (base if k == 1 else f"{base}-{k}"))
            try:
                path.mkdir()
            except FileExistsError:
                continue
            for sub in layout.FOLDERS:
                (path / sub).mkdir()
            return Run(path)
        raise RuntimeError(f"could not create a unique run folder for {base!r}")

    def open(self, run_id: str) -> Run:
        """An existing run by id (a single path component inside the runs folder)."""
        if sanitize_name(run_id) != run_id:
            raise ValueError(f"invalid run id {run_id!r}")
        path = self._inside(self.root / run_id)
        if not path.is_dir():
            raise FileNotFoundError(f"no run {run_id!r} in {self.root}")
        return Run(path)

    def runs(self) -> Iterator[Run]:
        """Every run folder, newest first."""
        if not self.root.is_dir():
            return iter(())
        folders = sorted((p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")),
                         key=lambda p: p.name, reverse=True)
        return (Run(p) for p in folders)
