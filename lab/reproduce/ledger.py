"""What a ``reproduce.json`` must hold before anything reads it: the one check of a full-scale reproduction's plan
file, every key and type, in the place it is read (:func:`lab.reproduce.launch.load_ledger`).

The file is written by the launcher (:func:`~lab.reproduce.launch.ledger_for`) but may be edited by hand, copied from
another machine or prepared by someone else: a list where an object belongs, a key missing, a run that is a string
or seeds of any type would otherwise surface as a traceback deep in planning or collecting, or pass silently into a
report. A file that is not what a launcher writes is refused as a whole, naming the first key that is wrong and why
(``reproduce.json: runs['mae-a1-s0'].processes must be an integer in [1, 4096]; got 'x'``), before a report, a log
or a run folder is written. Keys it does not know are left alone (a newer launcher may add some).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from lab.reproduce.claims import MAX_SEEDS, PAPERS
from lab.reproduce.full_scale import DATASETS, FULL_BUDGETS
from lab.runfolder.layout import LedgerState, RunState
from lab.runs.store import sanitize_name

EXECUTORS = ("local", "slurm")
"""How a reproduction's runs are launched (:mod:`lab.reproduce.launch`)."""
STATES = (*RunState, *LedgerState)
"""The states a run's record may be in."""
MAX_PROCESSES = 4096
"""The most training processes a run's record may name (``torchrun`` starts as many)."""
LOGS = "logs"
"""The folder of a reproduction that holds each run's log, ``logs/<key>.log``."""


class LedgerError(ValueError):
    """A ``reproduce.json`` that is not what a launcher writes; the message names the key and why."""


Check = Callable[[Any], str | None]
"""What a key's value must be: None when it is, else the requirement in words (``must be a string``)."""


def _text(value: Any) -> str | None:
    return None if isinstance(value, str) else "must be a string"


def _integer(lo: int, hi: int) -> Check:
    def check(value: Any) -> str | None:
        ok = isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi
        return None if ok else f"must be an integer in [{lo}, {hi}]"
    return check


def _one_of(choices: tuple[str, ...] | list[str]) -> Check:
    def check(value: Any) -> str | None:
        return None if isinstance(value, str) and value in choices else f"must be one of {', '.join(choices)}"
    return check


def _nullable(check: Check, what: str) -> Check:
    def nullable(value: Any) -> str | None:
        return None if value is None or check(value) is None else f"must be {what} or null"
    return nullable


def _number(value: Any) -> str | None:  # a non-finite number is written as null (strict JSON)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    return None if ok else "must be a non-negative number"


def _file_name(value: Any) -> str | None:
    ok = isinstance(value, str) and value not in ("", ".", "..") and "/" not in value and "\\" not in value
    return None if ok else "must be a file name (an entry of the run's analysis/ folder)"


def _job_id(value: Any) -> str | None:
    ok = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
    return None if ok else "must be a string"


_UNSHOWN = object()
"""A value :meth:`_Reader.fail` does not show (a key that is missing, a name that is wrong)."""


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


class _Reader:
    """Walks a parsed ``reproduce.json``, raising :class:`LedgerError` at the first value that is wrong."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, problem: str, value: Any = _UNSHOWN) -> NoReturn:
        shown = "" if value is _UNSHOWN else f"; got {_shown(value)}"
        raise LedgerError(f"{self.path}: {where} {problem}{shown}. The file is not what `lab reproduce --budget gpu` "
                          "writes, so nothing was planned, run or collected: restore it, or plan anew into another "
                          "--out")

    def value(self, where: str, value: Any, check: Check) -> Any:
        problem = check(value)
        if problem is not None:
            self.fail(where, problem, value)
        return value

    def mapping(self, where: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(where, "must be an object", value)
        return value

    def sequence(self, where: str, value: Any, check: Check | None = None) -> list[Any]:
        if not isinstance(value, list):
            self.fail(where, "must be a list", value)
        if check is not None:
            for i, item in enumerate(value):
                self.value(f"{where}[{i}]", item, check)
        return value

    def keys(self, where: str, record: dict[str, Any], required: dict[str, Check | None],
             optional: dict[str, Check | None] | None = None) -> None:
        """Check the keys of ``record``: each of ``required`` present, each present one of either kind by its check
        (None: checked by the caller)."""
        for key in required:
            if key not in record:
                self.fail(f"{where}{key}", "is missing")
        for key, check in {**required, **(optional or {})}.items():
            if key in record and check is not None:
                self.value(f"{where}{key}", record[key], check)

    def text_mapping(self, where: str, value: Any, keys: Check | None = None) -> None:
        for key, item in self.mapping(where, value).items():
            if keys is not None:
                self.value(f"{where} key {key!r}", key, keys)
            self.value(f"{where}[{key!r}]", item, _text)


def check_ledger(ledger: Any, path: Path) -> dict[str, Any]:
    """``ledger`` (a parsed ``reproduce.json`` read from ``path``) once every key a reader uses is checked.

    Raises:
        LedgerError: the first key that is missing, of the wrong type or out of range, named with its value.
    """
    read = _Reader(path)
    if not isinstance(ledger, dict):
        raise LedgerError(f"{path}: the file must hold a JSON object of a reproduction's plan; it holds a "
                          f"{type(ledger).__name__}: restore it, or plan anew into another --out")
    read.keys("", ledger, {"budget": _one_of(FULL_BUDGETS), "papers": None, "seeds": _integer(1, MAX_SEEDS),
                           "data": None, "runs": None},
              {"executor": _one_of(EXECUTORS), "created": _text, "updated": _text, "not_measurable": None,
               "experiments": None, "interrupted": lambda v: None if isinstance(v, bool) else "must be true or false",
               "nonfinite": None})
    read.sequence("papers", ledger["papers"], _one_of(list(PAPERS)))
    read.text_mapping("data", ledger["data"], _one_of(list(DATASETS)))
    if "not_measurable" in ledger:
        read.text_mapping("not_measurable", ledger["not_measurable"])
    runs = read.mapping("runs", ledger["runs"])
    for key, record in runs.items():
        _check_run(read, key, record)
    for i, experiment in enumerate(read.sequence("experiments", ledger.get("experiments", []))):
        where = f"experiments[{i}]"
        read.keys(f"{where}.", read.mapping(where, experiment), {"claims": None, "runs": None, "missing": None})
        read.sequence(f"{where}.claims", experiment["claims"], _text)
        for j, key in enumerate(read.sequence(f"{where}.runs", experiment["runs"], _text)):
            if key not in runs:
                read.fail(f"{where}.runs[{j}]", f"names no run of runs: {key!r}")
        read.text_mapping(f"{where}.missing", experiment["missing"])
    return ledger


def _check_run(read: _Reader, key: str, record: Any) -> None:
    """One run's record: the fields of :class:`~lab.reproduce.full_scale.PlannedRun` and what the launcher adds."""
    where = f"runs[{key!r}]"
    if sanitize_name(key) != key:
        read.fail(where, "is not a run's name (letters, digits, '-', '_' and '.'; a run folder and a log are named "
                  "after it)")
    record = read.mapping(where, record)
    read.keys(f"{where}.", record,
              {"config": _text, "overrides": None, "data": None},
              {"key": lambda v: None if v == key else "must be the run's name", "processes": _integer(1, MAX_PROCESSES),
               "steps": None, "images": _nullable(_number, "a non-negative number"),
               "bench": _nullable(_text, "a string"), "state": _one_of(STATES), "attempts": _integer(0, 10**6),
               "folder": _nullable(_text, "a string"), "message": _text, "recipe": _text, "job_id": _job_id,
               "stdout": _text, "stderr": _text,
               "log": lambda v: None if v == f"{LOGS}/{key}.log" else f"must be '{LOGS}/{key}.log'"})
    read.sequence(f"{where}.overrides", record["overrides"], _text)
    read.sequence(f"{where}.data", record["data"], _text)
    for i, step in enumerate(read.sequence(f"{where}.steps", record.get("steps", []))):
        at = f"{where}.steps[{i}]"
        read.keys(f"{at}.", read.mapping(at, step), {"args": None, "output": _file_name})
        read.sequence(f"{at}.args", step["args"], _text)
