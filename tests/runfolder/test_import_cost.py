"""The run-folder format is the bottom layer: a program that reads or writes run folders imports it without torch
and without the rest of the lab."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_format_loads_no_torch_and_no_other_lab_package():
    code = ("import sys, json; "
            "import lab.runfolder.layout, lab.runfolder.entries, lab.runfolder.writes, lab.runfolder.lock; "
            "print(json.dumps({'modules': sorted(sys.modules)}))")
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


def test_reading_and_listing_run_folders_loads_no_torch_and_no_model(tmp_path):
    """What the Runs page does with a folder of runs (list them, summarise each, open one: its config, its
    checkpoints and their steps, its newest snapshot) imports neither torch nor the models nor the config."""
    import torch

    from lab.runs.store import RunStore
    from lab.train.checkpoint import save_checkpoint

    run = RunStore(tmp_path).create("listed")
    run.write_config({"model": {"name": "residual_mlp", "depth": 4}})
    run.write_status("running", "step 7 of 10", step=7, total_steps=10)
    run.append_metrics({"kind": "eval", "step": 7, "test_acc": 0.75})
    save_checkpoint(run, {"model": {"w": torch.ones(2)}, "step": 7, "best_acc": 0.75}, "last", "best")
    run.save_snapshot("nodes", 7, {"x": torch.arange(3).numpy()})
    code = ("import sys, json; from pathlib import Path; import lab.runs, lab.runs.catalog; "
            "from lab.runs import RunCatalog, RunStore; "
            f"root = Path({str(tmp_path)!r}); catalog = RunCatalog(); "
            "[summary] = catalog.summaries([root]); reader = catalog.reader(summary['path']); "
            "from lab.runs.catalog import resolve_run_path; "
            "key = catalog.key(Path(summary['path']), [root]); opened = resolve_run_path(key, [root]); "
            "run = next(RunStore(root).runs()); "
            "print(json.dumps({'state': summary['state'], 'acc': summary['metrics']['test_acc'], "
            "'config': reader.config()[0], 'steps': sorted(c['step'] for c in reader.checkpoints()), "
            "'snapshot': run.load_snapshot('nodes')[0], 'opened': opened == Path(summary['path']).resolve(), "
            "'modules': sorted(sys.modules)}))")
    out = json.loads(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                                    check=True).stdout)
    assert (out["state"], out["acc"], out["steps"], out["snapshot"]) == ("running", 0.75, [7, 7], 7)
    assert out["opened"], "the run's key, typed back, opens the run"
    assert out["config"]["model"]["depth"] == 4
    assert "torch" not in out["modules"], "reading run folders imports torch"
    heavy = {m for m in out["modules"] if m.startswith(("lab.nn", "lab.train", "lab.config", "lab.data.toy2d"))}
    assert not heavy, heavy
