"""Run folders found and read for a listing: what each run is, how far it got, and what is wrong with its files.

Full-scale runs (``torchrun`` on a cluster) write the same run folder as the lab's own jobs
(:mod:`lab.runs.store`), so a mounted output folder can be listed and watched like the server's runs folder. Which
folders a server may read is fixed when it starts: its runs folder, plus the folders named by ``LAB_RUN_DIRS``
(paths separated by ``os.pathsep``). A path typed into a page must resolve inside one of them (the rule of
:func:`lab.data.roots.resolve_data_path`, applied to these roots).

A listed folder is a run folder (it holds any of ``status.json``, ``config.json``, ``config.yaml``,
``metrics.jsonl``, ``checkpoints/``), a sweep folder (``sweep.json`` beside member run folders; the members are
listed), or a folder of those. Readers are cheap to call again: :class:`RunReader` re-reads a file only when its
size, modification time or inode changed, and reads ``metrics.jsonl`` from where it stopped. Nothing here raises
for a damaged folder: what cannot be read is named in the summary's ``problems``.

No symbolic link inside a run folder is followed, whatever entry it stands for (``status.json``, ``config.json``,
``metrics.jsonl``, ``checkpoints/``, a checkpoint, ``figures/``, ``snapshots/``, ``sweep.json``): a folder from
a cluster or another user could link to any file this server can read. Such an entry reads as missing and is named
among the problems (``metrics.jsonl is a symbolic link: not read``). Every file is read through
:mod:`lab.runfolder.entries`: regular files only (a named pipe would block the reader), never through a link (so a file
swapped for a link after the check is not read either), each kind within its size cap, ``metrics.jsonl`` a chunk
per read. What an entry holds is checked before it is used: a 400-digit step or a NaN is no number here.
A run folder that is itself a link is listed only when it resolves inside the server's folders.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import logging
import math
import os
import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from lab.data.roots import resolve_data_path
from lab.runfolder import layout
from lab.runfolder.entries import (
    LIMITS,
    SHAPES,
    check_shape,
    checkpoint_field,
    kind_of,
    loads_yaml,
    read_bytes,
    read_json,
    read_jsonl,
    read_tail,
)
from lab.runfolder.layout import RunState

log = logging.getLogger(__name__)

RUN_MARKERS = (layout.STATUS, layout.CONFIG, layout.CONFIG_YAML, layout.METRICS, layout.CHECKPOINTS)
RUN_ENTRIES = (*RUN_MARKERS, layout.FIGURES, layout.SNAPSHOTS, layout.SWEEP)
"""The entries of a run folder a reader looks at; one that is a symbolic link is named among the problems."""
RUN_FILES = (layout.STATUS, layout.CONFIG, layout.CONFIG_YAML, layout.METRICS, layout.PROCESS_LOG, layout.SWEEP)
"""The files of a run folder the lab reads or appends to: each must be a regular file (the ``lock`` is the run
lock's to judge: one it cannot read names itself as held by someone unknown)."""
RUN_FOLDERS = (*layout.FOLDERS, layout.FIGURES, layout.ANALYSIS, layout.HISTORY)
"""The folders of a run folder the lab reads or writes into: each must be a folder."""
STALE_AFTER_S = 120.0
"""A running run whose heartbeat is older than this is marked stale (its writer may have died)."""
ALIVE = layout.ALIVE
MAX_STATE, MAX_MESSAGE = 40, 4000
"""The most characters of a status's state and message a listing keeps (a foreign status.json may hold more)."""
_NOT_METRICS = ("step", "epoch", "time", "kind")
Signature = tuple[int, int, int]


# -- which folders ---------------------------------------------------------------------------------------------
def run_roots(runs_dir: str | Path, env: str | None = None) -> list[Path]:
    """The folders a server reads runs from: ``runs_dir``, then each folder of ``LAB_RUN_DIRS`` (resolved, once each).

    Args:
        runs_dir: the server's runs folder (its job manager's store).
        env: the ``LAB_RUN_DIRS`` value (default: the environment's).
    """
    raw = os.environ.get("LAB_RUN_DIRS", "") if env is None else env
    roots = []
    for p in [str(runs_dir), *raw.split(os.pathsep)]:
        if p.strip():
            root = Path(p.strip()).expanduser().resolve()
            if root not in roots:
                roots.append(root)
    return roots


def resolve_run_path(text: str, roots: list[Path]) -> Path:
    """The folder ``text`` names, inside one of ``roots`` (a relative path is looked up in each root in turn).

    Raises:
        PermissionError: it lies outside every root (symbolic links are resolved first).
        FileNotFoundError: it lies inside but is not a folder.
    """
    where = ", ".join(map(str, roots))
    try:
        return resolve_data_path(text, roots)
    except PermissionError:
        raise PermissionError(f"{text.strip()!r} is outside the folders this server reads runs from ({where}); "
                              "start the server with LAB_RUN_DIRS=/path/to/runs to add a folder") from None
    except FileNotFoundError:
        raise FileNotFoundError(f"no folder {text.strip()!r} in the folders this server reads runs from "
                                f"({where})") from None


def run_key(path: Path, roots: list[Path]) -> str:
    """How a page names ``path``: relative to the first root holding it when :func:`resolve_run_path` finds it
    again that way, else the absolute path."""
    path = path.resolve()
    for root in roots:
        if path == root or root in path.parents:
            key = path.relative_to(root).as_posix()
            with contextlib.suppress(OSError):
                if key != "." and resolve_run_path(key, roots) == path:
                    return key
            break
    return str(path)


def is_sweep_folder(path: Path) -> bool:
    """Whether ``path`` holds a ``sweep.json`` (a file, not a symbolic link)."""
    file = path / layout.SWEEP
    return file.is_file() and not file.is_symlink()


def is_reproduction_folder(path: Path) -> bool:
    """Whether ``path`` holds a full-scale reproduction's ``reproduce.json`` (a file, not a symbolic link); its run
    folders are under its ``runs/``."""
    file = path / layout.REPRODUCTION
    return file.is_file() and not file.is_symlink()


def is_run_folder(path: Path) -> bool:
    """Whether ``path`` holds any entry of the run-folder contract (and is not a sweep folder); an entry that is a
    symbolic link counts (the folder is listed, the link named among its problems and not followed)."""
    return path.is_dir() and not is_sweep_folder(path) and any(os.path.lexists(path / m) for m in RUN_MARKERS)


def _subfolders(path: Path) -> list[Path]:
    """The folders in ``path`` by name (hidden ones left out); an entry that cannot be checked (a link in a loop,
    ELOOP) is left out alone, not the whole listing with it."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(path):
            with contextlib.suppress(OSError):
                if not entry.name.startswith(".") and entry.is_dir():
                    found.append(Path(entry.path))
    return sorted(found, key=lambda p: p.name)


def find_runs(folder: Path, roots: list[Path] | None = None) -> list[Path]:
    """The run folders ``folder`` is or holds: itself, a sweep's members, a reproduction's runs, or its sub-folders
    that are runs, sweeps or reproductions (their members follow them); newest first by name (run ids start with their
    UTC time).

    Args:
        folder: the folder to list.
        roots: when given, a sub-folder that resolves outside every root (a symbolic link) is left out.
    """
    def inside(p: Path) -> bool:  # a sub-folder that is no link lies where its folder lies
        if roots is None or not os.path.islink(p):
            return True
        r = p.resolve()
        return any(r == root or root in r.parents for root in roots)

    def members(group: Path) -> list[Path]:
        """A sweep's members, or the run folders of a reproduction's ``runs/``, in name order."""
        holder = group / layout.REPRODUCTION_RUNS if is_reproduction_folder(group) else group
        return [p for p in _subfolders(holder) if inside(p) and is_run_folder(p)] if inside(holder) else []

    if is_run_folder(folder):
        return [folder]
    if is_sweep_folder(folder) or is_reproduction_folder(folder):
        return members(folder)
    found = []
    for sub in reversed(_subfolders(folder)):
        if not inside(sub):
            continue
        if is_sweep_folder(sub) or is_reproduction_folder(sub):
            found.extend(members(sub))
        elif is_run_folder(sub):
            found.append(sub)
    return found


# -- reading one folder ----------------------------------------------------------------------------------------
def _signature(path: Path) -> Signature | None:
    """``(inode, size, mtime)`` of a run's file, or None when it is missing or a symbolic link — the file itself or
    the sub-folder holding it (``checkpoints/``): a link could lead outside the folders this server may read, so
    every reader treats it as missing."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or (path.parent.name in (layout.CHECKPOINTS, layout.FIGURES)
                                        and path.parent.is_symlink()):
            return None
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def linked_entries(path: Path) -> list[str]:
    """The entries of the run folder ``path`` that a reader would look at and that are symbolic links
    (:data:`RUN_ENTRIES`, ``failed-rank*.txt``, and the checkpoints in ``checkpoints/``), as ``checkpoints/a.pt``."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(path):
            if entry.is_symlink() and (entry.name in RUN_ENTRIES
                                       or fnmatch.fnmatchcase(entry.name, layout.failed_rank_name("*"))):
                found.append(entry.name)
    checkpoints = path / layout.CHECKPOINTS
    if layout.CHECKPOINTS not in found:
        with contextlib.suppress(OSError):
            found += [f"{layout.CHECKPOINTS}/{e.name}" for e in os.scandir(checkpoints)
                      if e.name.endswith(layout.CHECKPOINT_SUFFIX) and e.is_symlink()]
    return sorted(found)


def irregular_entries(path: Path) -> list[str]:
    """The entries of the run folder ``path`` that the lab reads, appends to or writes into and that are not what
    they should be, as ``metrics.jsonl (a named pipe)``: a file of :data:`RUN_FILES` that is a named pipe, a socket, a
    device or a folder, or a folder of :data:`RUN_FOLDERS` that is not one. A named pipe blocks whoever opens it and
    a folder cannot be appended to, so a run holding one would fail once it had started. Links are named by
    :func:`linked_entries`."""
    found = []
    for name in (*RUN_FILES, *RUN_FOLDERS):
        try:
            mode = os.lstat(path / name).st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            continue
        if name in RUN_FILES and not stat.S_ISREG(mode):
            found.append(f"{name} ({kind_of(mode)})")
        elif name in RUN_FOLDERS and not stat.S_ISDIR(mode):
            found.append(f"{name} ({kind_of(mode)}, not a folder)")
    return found


def _number(value: Any) -> float | None:
    """``value`` as a finite float, or None (booleans, strings, NaN and integers beyond float range are not numbers
    here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value) if math.isfinite(value) else None
    except OverflowError:
        return None


def _int(value: Any) -> int | None:
    number = _number(value)
    return None if number is None else int(number)


def clean_status(raw: Any) -> tuple[dict[str, Any], list[str]]:
    """A status.json object with the types a page may rely on, and what was wrong with it.

    Returns ``{"state": str, "message": str, "step", "epoch", "total_steps": int | None, "heartbeat": float | None,
    "metrics": {name: float}}`` plus the other fields unchanged (``traceback``, ``members``, …).
    """
    if not isinstance(raw, dict):
        return {"state": "unknown", "message": "", "metrics": {}}, ["status.json does not hold an object"]
    problems = []
    state = raw.get("state")
    if not isinstance(state, str) or not state:
        problems.append("status.json has no state")
        state = "unknown"
    elif len(state) > MAX_STATE:
        problems.append(f"status.json's state is {len(state)} characters long (shortened)")
        state = state[:MAX_STATE] + "…"
    message = str(raw.get("message") or "")
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE] + f"… ({len(message) - MAX_MESSAGE} more characters)"
    metrics = raw.get("metrics") if isinstance(raw.get("metrics"), dict) else {}
    status = {**raw, "state": state, "message": message,
              "step": _int(raw.get("step")), "epoch": _int(raw.get("epoch")),
              "total_steps": _int(raw.get("total_steps")), "heartbeat": _number(raw.get("heartbeat")),
              "metrics": {k: v for k, v in ((k, _number(v)) for k, v in metrics.items()) if v is not None}}
    return status, problems


def _reason(err: Exception) -> str:
    """An exception's first line, shortened (its type's name when it says nothing)."""
    return ((str(err).strip().splitlines() or [type(err).__name__])[0])[:160]


def _read_json(path: Path) -> tuple[Any, str | None]:
    """The parsed file (within its kind's size cap) and None, or None and why it could not be read."""
    try:
        return read_json(path, LIMITS[path.name]), None
    except FileNotFoundError:
        return None, "missing"
    except (OSError, ValueError) as err:  # a pipe, too large, not JSON: the reader's message says which
        return None, f"unreadable ({_reason(err)})"


def checkpoint_step(path: Path) -> int | None:
    """The ``step`` a checkpoint holds, read without torch (:func:`~lab.runfolder.entries.checkpoint_field`); None
    when it holds none or cannot be read."""
    return _int(checkpoint_field(path, "step"))


class RunReader:
    """One run folder, read again only where it changed.

    status.json and config.json are parsed again when their size, mtime or inode changed; ``metrics.jsonl`` is
    read from the byte where the last read stopped (from the start again when the file was replaced or shrank, as a
    resumed run rewrites it); a checkpoint's step is read once per version of the file.

    Args:
        path: the run folder.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._status: tuple[Signature | None, dict[str, Any], list[str]] | None = None
        self._config: list | None = None  # [signatures, config, YAML view or what makes it, problems]
        self._metrics_sig: Signature | None = None
        self._cursor = 0
        self.last: dict[str, float] = {}  # the newest value of every numeric metric field
        self.last_step: int | None = None
        self.records = 0
        self.bad_lines = 0
        self.torn = False  # the file ends in a line without its newline
        self.unread = False  # metrics.jsonl holds more than the last read took (it is read a chunk at a time)
        self.metrics_problem: str | None = None  # why metrics.jsonl could not be read
        self._steps: dict[str, tuple[Signature, int | None]] = {}
        self._base: dict[str, Any] | None = None  # the last summary's time-independent fields
        self._base_key: tuple | None = None  # and the folder's state it was read from (:meth:`_folder_key`)

    # -- status -----------------------------------------------------------------------------------------------
    def status(self) -> tuple[dict[str, Any], list[str]]:
        """The cleaned status (:func:`clean_status`; state ``unknown`` when missing or unreadable) and its problems."""
        file = self.path / layout.STATUS
        sig = _signature(file)
        if self._status is None or self._status[0] != sig:
            raw, error = _read_json(file) if sig is not None else (None, "missing")
            if error is not None:
                status = {"state": "unknown", "message": "", "metrics": {}, "step": None, "total_steps": None,
                          "heartbeat": None}
                status, problems = status, [f"status.json is {error}" if error != "missing" else "no status.json"]
            else:
                status, problems = clean_status(raw)
            if status.get("heartbeat") is None and sig is not None:  # a writer without heartbeats: its last write
                status["heartbeat"] = sig[2] / 1e9
            self._status = (sig, status, problems)
        return dict(self._status[1]), list(self._status[2])

    # -- config -----------------------------------------------------------------------------------------------
    def config(self) -> tuple[dict[str, Any], str, list[str]]:
        """The resolved config (``{}`` when unreadable), a readable YAML view of it, and its problems.

        config.json is the contract; a folder with only ``config.yaml`` (a child process that has not started
        training yet) is read from that. The YAML view is made when first asked for, not for every run a listing
        reads (for 3,000 runs it was two thirds of the first listing's time).
        """
        cached = self._read_config_once()
        if callable(cached[2]):
            cached[2] = cached[2]()
        return dict(cached[1]), cached[2], list(cached[3])

    def _config_data(self) -> tuple[dict[str, Any], list[str]]:
        """:meth:`config` without its YAML view."""
        cached = self._read_config_once()
        return dict(cached[1]), list(cached[3])

    def _read_config_once(self) -> list:
        """``[signatures, config, YAML view (or what makes it), problems]``, read again when a file changed."""
        json_file, yaml_file = self.path / layout.CONFIG, self.path / layout.CONFIG_YAML
        sig = (_signature(json_file), _signature(yaml_file))
        if self._config is None or self._config[0] != sig:
            self._config = [sig, *self._read_config(json_file, yaml_file, sig)]
        return self._config

    @staticmethod
    def _read_config(json_file: Path, yaml_file: Path, sig: tuple
                     ) -> tuple[dict[str, Any], str | Callable[[], str], list[str]]:
        problems = []
        if sig[0] is not None:
            data, error = _read_json(json_file)
            if error is None and isinstance(data, dict) and isinstance(data.get("config"), dict):
                about = {k: data[k] for k in ("versions", "git_commit") if data.get(k)}
                return data["config"], functools.partial(_yaml_view, data["config"], about), problems
            problems.append(f"config.json is {error}" if error else "config.json holds no config section")
        elif sig[1] is None:
            return {}, "", ["no config.json"]
        if sig[1] is not None:
            try:
                text = read_bytes(yaml_file, LIMITS[layout.CONFIG_YAML]).decode()
                data = loads_yaml(text)
                check_shape(data, *SHAPES[layout.CONFIG_YAML], layout.CONFIG_YAML)
                return (data if isinstance(data, dict) else {}), text, problems
            except (OSError, ValueError, yaml.YAMLError) as err:  # UnicodeDecodeError is a ValueError
                problems.append(f"config.yaml is unreadable ({_reason(err)})")
        return {}, "", problems

    # -- metrics ----------------------------------------------------------------------------------------------
    @property
    def metrics_file(self) -> tuple[int, int] | None:
        """``(inode, size)`` of metrics.jsonl as last read (None when it was missing): a new inode or a smaller size
        means the file was rewritten (a resumed run drops the records after its checkpoint)."""
        return None if self._metrics_sig is None else self._metrics_sig[:2]

    def update_metrics(self) -> bool:
        """Read what was appended to metrics.jsonl since the last call (a chunk of it at most: a long file is read
        over several calls); returns whether anything was read."""
        file = self.path / layout.METRICS
        sig = _signature(file)
        if sig == self._metrics_sig and not self.unread:
            return False
        if sig is None or self._metrics_sig is None or sig[0] != self._metrics_sig[0] or sig[1] < self._cursor:
            self._cursor, self.last, self.last_step, self.records, self.bad_lines = 0, {}, None, 0, 0
        self._metrics_sig = sig
        self.metrics_problem, self.unread, self.torn = None, False, False
        if sig is None:
            return False
        try:
            records, self._cursor, bad, self.torn, self.unread = read_jsonl(file, self._cursor)
        except OSError as err:
            self.metrics_problem = f"metrics.jsonl is unreadable ({_reason(err)})"
            return False
        self.bad_lines += bad
        for record in records:
            self.records += 1
            self.last_step = _int(record.get("step")) if "step" in record else self.last_step
            for k, v in record.items():
                number = _number(v)
                if number is not None and k not in _NOT_METRICS:
                    self.last[k] = number
        return True

    # -- checkpoints ------------------------------------------------------------------------------------------
    def checkpoints(self) -> list[dict[str, Any]]:
        """``{"name", "size", "modified", "step"}`` of each ``checkpoints/*.pt``, newest first."""
        out = []
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.path / layout.CHECKPOINTS):
                if not entry.name.endswith(layout.CHECKPOINT_SUFFIX) or not entry.is_file():
                    continue
                file = Path(entry.path)
                sig = _signature(file)
                if sig is None:
                    continue
                cached = self._steps.get(entry.name)
                if cached is None or cached[0] != sig:
                    cached = self._steps[entry.name] = (sig, checkpoint_step(file))
                out.append({"name": entry.name, "size": sig[1], "modified": sig[2] / 1e9, "step": cached[1]})
        return sorted(out, key=lambda c: -c["modified"])

    # -- all of it --------------------------------------------------------------------------------------------
    def summary(self, now: float | None = None, stale_after_s: float = STALE_AFTER_S) -> dict[str, Any]:
        """One row of a run listing; read again only when the folder, its checkpoints or one of its files changed
        (a few ``lstat`` calls otherwise: thousands of unchanged runs cost next to nothing).

        Returns:
            ``path``, ``name`` (the folder's), ``model`` (config ``model.name``), ``state``, ``message``, ``step``,
            ``total_steps``, ``heartbeat`` (Unix time), ``age_s`` (seconds since it), ``stale`` (running with a
            heartbeat older than ``stale_after_s``), ``alive`` (queued, running or paused), ``metrics`` (the newest
            value of each numeric field of metrics.jsonl, then of status.json's ``metrics``), ``records`` and
            ``problems`` (what could not be read, one phrase each).
        """
        now = time.time() if now is None else now
        key = self._folder_key()
        if self._base is None or key != self._base_key or self.unread:
            before = set(self._base["problems"]) if self._base is not None else set()
            self._base, self._base_key = self._read_summary(), key
            for problem in self._base["problems"]:  # each problem logged once, when it appears
                if problem not in before:
                    log.warning("run folder %s: %s", self.path, problem)
        base = self._base
        age = None if base["heartbeat"] is None else max(0.0, now - base["heartbeat"])
        stale = base["state"] == RunState.RUNNING and age is not None and age > stale_after_s
        return {**base, "age_s": age, "stale": stale,
                "metrics": dict(base["metrics"]), "problems": list(base["problems"])}

    def _folder_key(self) -> tuple:
        """What changes when anything a summary reads changes: the folder's and its checkpoints' modification times
        (an entry added, removed or replaced) and the signatures of the files rewritten in place."""
        stamps = []
        for folder in (self.path, self.path / layout.CHECKPOINTS):
            try:
                st = os.lstat(folder)
                stamps.append((st.st_ino, st.st_mtime_ns))
            except OSError:
                stamps.append(None)
        return (*stamps, *(_signature(self.path / name) for name in (layout.STATUS, layout.CONFIG, layout.CONFIG_YAML,
                                                                     layout.METRICS)))

    def _read_summary(self) -> dict[str, Any]:
        """The summary's fields that do not depend on the time of asking."""
        status, problems = self.status()
        config, config_problems = self._config_data()
        self.update_metrics()
        problems += config_problems
        if self.bad_lines:
            problems.append(f"{self.bad_lines} unreadable line{'s' * (self.bad_lines > 1)} in metrics.jsonl "
                            "(skipped)")
        if self.torn and status["state"] not in ALIVE:
            problems.append("metrics.jsonl ends in a half-written line (skipped)")
        if self.metrics_problem:
            problems.append(self.metrics_problem)
        problems += [f"{name} is a symbolic link: not read" for name in linked_entries(self.path)]
        for note in sorted(self.path.glob(layout.failed_rank_name("*")))[:8]:  # a failed torchrun process, not rank 0
            if _signature(note) is not None:
                with contextlib.suppress(OSError):
                    last = (read_tail(note).decode(errors="replace").strip().splitlines() or ["no traceback"])[-1]
                    problems.append(f"process {note.stem.removeprefix('failed-')} failed: {last[:200]}")
        model = config.get("model") if isinstance(config.get("model"), dict) else {}
        state = status["state"]
        step = status.get("step")
        if step is None and self.last_step is not None:
            step = self.last_step
        return {"path": self.path, "name": self.path.name, "model": str(model.get("name") or ""), "state": state,
                "message": status.get("message", ""), "step": step, "total_steps": status.get("total_steps"),
                "heartbeat": status.get("heartbeat"), "alive": state in ALIVE,
                "metrics": {**status.get("metrics", {}), **self.last}, "records": self.records,
                "problems": problems}


def _yaml_view(config: dict[str, Any], about: dict[str, Any]) -> str:
    """A config as readable YAML, with what wrote it (versions, git commit) as comments after it."""
    text = yaml.safe_dump(config, sort_keys=False, width=100)
    if about:
        lines = yaml.safe_dump(about, sort_keys=False).splitlines()
        text += "\n# written by\n" + "".join(f"# {line}\n" for line in lines)
    return text


def run_summary(path: str | Path, now: float | None = None, stale_after_s: float = STALE_AFTER_S) -> dict[str, Any]:
    """:meth:`RunReader.summary` of the folder ``path``, read afresh."""
    return RunReader(path).summary(now, stale_after_s)


class RunCatalog:
    """Readers of every folder listed so far: a listing read again touches only files that changed."""

    def __init__(self) -> None:
        self.readers: dict[Path, RunReader] = {}
        self._keys: dict[Path, str] = {}

    def key(self, path: Path, roots: list[Path]) -> str:
        """:func:`run_key` of ``path``, remembered (it resolves the path: a few system calls per run)."""
        if path not in self._keys:
            self._keys[path] = run_key(path, roots)
        return self._keys[path]

    def reader(self, path: Path) -> RunReader:
        path = Path(path)
        if path not in self.readers:
            self.readers[path] = RunReader(path)
        return self.readers[path]

    def paths(self, folders: Iterable[Path], roots: list[Path] | None = None) -> list[Path]:
        """Every run :func:`find_runs` finds in ``folders``, each once, in folder order (newest first in each);
        the readers of folders no longer listed are dropped."""
        paths: dict[Path, None] = {}  # in order, each once
        for folder in folders:
            paths.update(dict.fromkeys(find_runs(folder, roots)))
        for gone in set(self.readers) - set(paths):
            del self.readers[gone]
        return list(paths)

    def summaries(self, folders: Iterable[Path], roots: list[Path] | None = None, now: float | None = None,
                  stale_after_s: float = STALE_AFTER_S) -> list[dict[str, Any]]:
        """The summary of every run :meth:`paths` lists."""
        return self.summaries_of(self.paths(folders, roots), now, stale_after_s)

    def summaries_of(self, paths: Iterable[Path], now: float | None = None,
                     stale_after_s: float = STALE_AFTER_S) -> list[dict[str, Any]]:
        """The summary of each run folder of ``paths``, in order."""
        now = time.time() if now is None else now
        return [self.reader(p).summary(now, stale_after_s) for p in paths]
