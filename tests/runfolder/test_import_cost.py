"""The run-folder format is the bottom layer: a program that reads or writes run folders imports it without torch
and without the rest of the lab."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_format_loads_no_torch_and_no_other_lab_package():
    code = ("import sys, time, json; t = time.perf_counter(); "
            "import lab.runfolder.layout, lab.runfolder.entries, lab.runfolder.writes, lab.runfolder.lock; "
            "print(json.dumps({'ms': 1000 * (time.perf_counter() - t), 'modules': sorted(sys.modules)}))")
    out = json.loads(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                                    check=True).stdout)
    assert "torch" not in out["modules"], "the format imports torch"
    lab_modules = {m for m in out["modules"] if m == "lab" or m.startswith("lab.")}
    assert lab_modules == {"lab", "lab.runfolder", *(f"lab.runfolder.{m}" for m in ("layout", "entries", "writes",
                                                                                        "lock"))}, lab_modules


def test_the_package_names_are_still_there_when_asked_for():
    """``lab`` imports its models' registry only when a name of it is used."""
    import lab

    assert "residual_mlp" in lab.list_models() and callable(lab.create_model)
