"""The docs quote constants of the code; each quote is checked here, so a constant changed in the code but not in
the prose fails instead of leaving the docs wrong."""

import inspect
from pathlib import Path

import pytest

from lab.jobs import child, manager, thread
from lab.jobs.process import ProcessJob
from lab.snapshots import publish
from lab.train import recorder

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



def test_the_architecture_lists_every_bench_script():
    """``bench/`` is listed twice in ARCHITECTURE.md: its row of *Where things are*, and *Where to measure*, which says
    what each script measures; a new script in neither is a benchmark nobody finds."""
    import re

    scripts = {p.name for p in (DOCS.parent / "bench").glob("*.py")} - {"__init__.py", "common.py"}
    text = (DOCS / "ARCHITECTURE.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `bench/` |"))
    measure = text.split("## Where to measure", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"`(\w+\.py)`", row)) == scripts
    assert {s for s in scripts if f"`{s}`" not in measure} == set()


@pytest.mark.slow
def test_the_site_builds_offline_with_every_reference_resolved(tmp_path):
    """The user pages and the API reference of every module build with warnings as errors: a docstring's reference to
    a `lab` name that does not exist (a module moved, a function renamed) fails here, as does malformed markup."""
    import pkgutil
    import subprocess
    import sys

    import lab

    out = tmp_path / "html"
    build = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS),
                            str(out)], capture_output=True, text=True)
    assert build.returncode == 0, f"sphinx-build failed:\n{build.stderr[-20000:]}"
    modules = [m.name for m in pkgutil.walk_packages(lab.__path__, "lab.") if not m.name.split(".")[-1].startswith("_")]
    missing = [name for name in ["lab", *modules] if not (out / "api" / f"{name}.html").is_file()]
    assert not missing, f"modules without a page in the API reference: {missing}"
