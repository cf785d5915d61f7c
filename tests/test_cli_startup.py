"""What a command loads: its parser builds only its own options and only its own module runs it (``lab.cli.<command>``),
so ``lab train --help`` answers without torch, the reproductions, the reports or submitit, and ``lab train`` runs
without the other commands' modules."""

import json
import subprocess
import sys

import pytest

from lab.cli import COMMANDS

LOADED = """
import contextlib, io, json, sys
from lab.cli import main
with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()), \\
        contextlib.redirect_stderr(io.StringIO()):
    main(sys.argv[1:])
print(json.dumps(sorted(sys.modules)))
"""


def loaded(*argv: str) -> list[str]:
    """The modules a fresh interpreter holds after ``python -m lab ARGV`` (a command that exits included)."""
    out = subprocess.run([sys.executable, "-c", LOADED, *argv], capture_output=True, text=True, timeout=120,
                         check=True)
    return json.loads(out.stdout)


def lab_modules(modules: list[str]) -> list[str]:
    return [m for m in modules if m == "lab" or m.startswith("lab.")]


def test_train_help_loads_a_handful_of_lab_modules_and_neither_torch_nor_submitit():
    modules = loaded("train", "spiral", "--help")
    ours = lab_modules(modules)
    assert len(ours) <= 45, ours  # measured: 7 (every command's parser and implementation: 126)
    assert not [m for m in ours if m.startswith(("lab.reproduce", "lab.reports"))], ours
    assert "submitit" not in modules and "torch" not in modules
    assert [m for m in ours if m.startswith("lab.cli")] == ["lab.cli", "lab.cli.options"]


@pytest.mark.slow  # eleven interpreters, most of them importing torch
@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "reproduce"])  # reproduce's options name the papers
def test_no_commands_help_loads_the_reproductions_or_submitit(command):
    modules = loaded(command, "--help")
    assert "submitit" not in modules
    assert not [m for m in modules if m.startswith("lab.reproduce")]
    assert not [m for m in modules if m.startswith("lab.cli.") and m != "lab.cli.options"]


def test_a_command_imports_its_own_module_only():
    modules = loaded("serve", "--port", "70000")  # refused at once, after dispatch
    assert [m for m in modules if m.startswith("lab.cli.")] == ["lab.cli.options", "lab.cli.serve"]
