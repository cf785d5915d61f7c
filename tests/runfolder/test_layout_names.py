"""Only the format package ``lab/runfolder/`` spells a run folder's entry names (``layout.py``): anywhere else in
``lab/`` a path built from a literal that names a run-folder entry or a kept checkpoint
(``run.path / "analysis" / "probe.json"``, ``f"samples-{step:09d}.png"``, ``run.checkpoint_path("best")``), or a
name made by an f-string the way run-folder files are named (``f"{kind}-{version:09d}.npz"``,
``f"metrics-{stamp}.jsonl"``, ``f"{name}.pt"``), fails here, so the format stays in the one table readers and writers
share."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import lab
from lab.runfolder import layout

LAB = Path(lab.__file__).parent
NAMES = {value for key, value in vars(layout).items() if key.isupper() and isinstance(value, str)} | \
    {str(name) for name in layout.Checkpoint}
PREFIXES = tuple(f"{kind}-" for kind in (layout.RECONSTRUCTION, layout.SAMPLES, layout.PROBE_FIGURE, "features",
                                         "last-before-step", "restart"))
PATH_CALLS = {"Path", "open", "glob", "rglob", "joinpath", "with_name", "is_file", "exists", "history_path",
              "analysis_path", "checkpoint_path", "figure_path", "load_checkpoint", "save_checkpoint",
              "has_checkpoint", "figure_name", "samples_name", "features_name"}
"""Every call that builds a path inside a run folder from its arguments (each path builder of the format)."""
ALLOWED = {
    ("data/latents.py", "config.json"): "a VAE folder's diffusers config, not a run folder's",
    ("nn/hf.py", "config.json"): "a Hugging Face model folder's config, not a run folder's",
}
SUFFIXES = (".npz", ".jsonl", ".json", ".pt")
"""How the run folder's files end: an f-string that makes a name ending so is one of its names."""


def _text(node: ast.AST) -> str | None:
    """The literal start of a string or f-string node (an f-string's leading constant part)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value)
    return None


def _names_a_run_entry(text: str) -> bool:
    first = text.strip("/").split("/")[0]
    return first in NAMES or first.startswith(PREFIXES) or first.startswith(layout.TFEVENTS_PREFIX)


def _makes_a_name(node: ast.JoinedStr) -> bool:
    """Whether the f-string ``node`` makes a file name as run folders name theirs: a literal part ending in one of
    :data:`SUFFIXES`, or a number formatted to 9 digits (a step or a version)."""
    for part in node.values:
        if isinstance(part, ast.Constant) and str(part.value).endswith(SUFFIXES):
            return True
        if isinstance(part, ast.FormattedValue) and isinstance(part.format_spec, ast.JoinedStr) and \
                [getattr(v, "value", None) for v in part.format_spec.values] == ["09d"]:
            return True
    return False


def _spelled(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, literal)`` of every literal used to build a path that names a run-folder entry, and of every
    f-string that makes a run-folder file's name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and _makes_a_name(node):
            found.append((node.lineno, ast.unparse(node)))
            continue
        operands: list[ast.AST] = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            operands = [node.left, node.right]
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in PATH_CALLS:
                operands = list(node.args)
        for operand in operands:
            text = _text(operand)
            if text is not None and _names_a_run_entry(text):
                found.append((operand.lineno, text))
    return found


def test_no_run_folder_name_is_spelled_outside_the_format_package():
    spelled = []
    for path in sorted(LAB.rglob("*.py")):
        where = path.relative_to(LAB).as_posix()
        if where.startswith("runfolder/"):
            continue
        for line, text in _spelled(ast.parse(path.read_text(), filename=str(path))):
            if (where, text) not in ALLOWED:
                spelled.append(f"lab/{where}:{line}: {text!r}")
    assert not spelled, "run-folder names spelled outside lab/runfolder/ (use its layout.py):\n" + "\n".join(spelled)


def test_the_check_sees_the_spellings_it_forbids():
    """The check itself: each way a name used to be spelled is caught, and a name from the table is not."""
    caught = ['run.path / "analysis" / "probe.json"', 'folder / f"samples-{step:09d}.png"',
              'Path(run, "metrics.jsonl")', 'folder.glob("reconstruction-*.png")', 'run / "checkpoints"',
              'run.checkpoint_path("best")', 'run.load_checkpoint("last")', 'run.figure_path("probe", 3)']
    for source in caught:
        assert _spelled(ast.parse(source)), source
    for source in ['run.analysis_path(layout.PROBE)', 'run.path / layout.ANALYSIS', 'x / "images"',
                   'run.checkpoint_path(Checkpoint.LAST)']:
        assert not _spelled(ast.parse(source)), source


@pytest.mark.parametrize("source", ['path = folder / f"{kind}-{version:09d}.npz"', 'f"{SAVED_PREFIX}{step:09d}"',
                                    'aside = f"metrics-{stamp}.jsonl"', 'name = f"{sanitize_name(name)}.pt"',
                                    'folder.glob(f"{prefix}*.npz")', 'f"{stem}.json"'])
def test_the_check_sees_names_made_by_f_strings(source):
    assert _spelled(ast.parse(source)), source


@pytest.mark.parametrize("source", ['f"{path} is not a snapshot (.npz): {err}"', 'f"step {step:,}"',
                                    'f"{kind}-{step:04d}"', 'layout.snapshot_name(kind, version)'])
def test_an_f_string_that_names_no_run_folder_file_passes(source):
    assert not _spelled(ast.parse(source)), source



def test_a_snapshot_name_reads_back_as_its_version_and_no_other_name_does():
    assert layout.snapshot_name("nodes", 12) == "nodes-000000012.npz"
    assert layout.snapshot_version("nodes", layout.snapshot_name("nodes", 12)) == 12
    for name in ("nodes-extra-000000001.npz", "node-000000001.npz", "nodes-00000001x.npz", "nodes-\u00b2.npz",
                 "nodes-000000001.npy", "nodes-.npz"):
        assert layout.snapshot_version("nodes", name) is None, name
