"""The docs quote constants of the code; each quote is checked here, so a constant changed in the code but not in
the prose fails instead of leaving the docs wrong."""

import inspect
from pathlib import Path

import pytest

from lab.jobs import child, manager, publish, thread
from lab.jobs.process import ProcessJob
from lab.runs import recorder

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _default(fn, name: str):
    return inspect.signature(fn).parameters[name].default


def _max_jobs_default(monkeypatch) -> int:
    monkeypatch.delenv("LAB_MAX_JOBS", raising=False)
    return manager.settings_from_env()["max_jobs"]


QUOTES = [  # (doc, the phrase, with {} where each value stands, the values in the code)
    ("run-folder.md", "`CHECKPOINT_S` = {} s", lambda _: [recorder.CHECKPOINT_S]),
    ("run-folder.md", "`GRACE_S` = {} s", lambda _: [child.GRACE_S]),
    ("run-folder.md", "grace period ({} s by default)", lambda _: [_default(ProcessJob.__init__, "grace_s")]),
    ("run-folder.md", "the newest {} stay, and at most {} older",
     lambda _: [_default(publish.DiskSink.__init__, "keep_last"), _default(publish.DiskSink.__init__, "keep_history")]),
    ("run-folder.md", "({} s by default for a `ThreadJob`",
     lambda _: [_default(thread.ThreadJob.__init__, "disk_every_s")]),
    ("ARCHITECTURE.md", "(`LAB_MAX_JOBS`, default {};", lambda mp: [_max_jobs_default(mp)]),
]


@pytest.mark.parametrize(("doc", "phrase", "values"), QUOTES, ids=[q[1] for q in QUOTES])
def test_each_constant_the_docs_quote_is_the_codes(doc, phrase, values, monkeypatch):
    text = " ".join((DOCS / doc).read_text().split())  # a phrase may be wrapped across lines
    expected = phrase.format(*(f"{v:g}" for v in values(monkeypatch)))
    assert expected in text, f"docs/{doc} should say {expected!r}"

