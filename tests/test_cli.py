import json
import subprocess
import sys

import pytest

from lab.cli import main
from lab.config import ExperimentConfig, from_dict, load_config


def test_cli_writes_a_well_formed_run_folder(tmp_path, capsys):
    code = main(["train", "configs/spiral.yaml", "model.depth=3", "model.width=8", "data.n=512",
                 "train.epochs=100", "train.max_steps=30", "--runs-dir", str(tmp_path), "--name", "cli test",
                 "--snapshot-every", "10"])
    assert code == 0
    (run,) = list(tmp_path.iterdir())
    assert run.name.endswith("-cli-test")
    resolved = from_dict(ExperimentConfig, json.loads((run / "config.json").read_text())["config"])
    assert resolved == load_config("configs/spiral.yaml", ["model.depth=3", "model.width=8", "data.n=512",
                                                           "train.epochs=100", "train.max_steps=30"])
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "completed" and status["step"] == 30 and 0 <= status["metrics"]["test_acc"] <= 1
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines if r["kind"] == "step"] == [10, 20, 30]
    assert {r["kind"] for r in lines} == {"step", "eval"}
    assert (run / "checkpoints" / "last.pt").is_file() and list(run.glob("events.out.tfevents.*"))
    assert sorted(p.name for p in (run / "snapshots").iterdir())[-1] == "nodes-000000030.npz"
    assert "completed" in capsys.readouterr().err


def test_cli_bad_input_is_a_clear_error(tmp_path, capsys):
    assert main(["train", "configs/spiral.yaml", "model.alpha_min=2", "--runs-dir", str(tmp_path)]) == 2
    assert "model.alpha_min must be in [0.0, 1.0]; got 2" in capsys.readouterr().err
    assert main(["train", "configs/spiral.yaml", "model.dpeth=2", "--runs-dir", str(tmp_path)]) == 2
    assert "unknown key model.dpeth" in capsys.readouterr().err
    assert main(["resume", "no-such-run", "--runs-dir", str(tmp_path)]) == 2
    assert not list(tmp_path.iterdir())  # nothing written for bad input


def test_cli_says_when_a_config_uses_a_renamed_key(tmp_path, capsys):
    code = main(["train", "configs/spiral.yaml", "model.depth=2", "model.width=4", "data.n=256",
                 "train.droppath=droppath", "train.drop_rate=0.2", "train.max_steps=2", "--runs-dir", str(tmp_path),
                 "--no-progress"])
    assert code == 0
    assert "warning: train.drop_rate is deprecated; it is the drop-path rate and is now called " \
           "train.drop_path_rate" in capsys.readouterr().err
    (run,) = list(tmp_path.iterdir())
    assert json.loads((run / "config.json").read_text())["config"]["train"]["drop_path_rate"] == 0.2
    assert main(["train", "configs/spiral.yaml", "train.drop_rate=0.2", "train.drop_path_rate=0.2",
                 "--runs-dir", str(tmp_path)]) == 2
    assert "are both given" in capsys.readouterr().err


def test_cli_reports_divergence(tmp_path, capsys):
    code = main(["train", "configs/spiral.yaml", "model.depth=3", "data.n=512", "train.optimizer=sgd",
                 "train.lr=50", "--runs-dir", str(tmp_path), "--no-progress"])
    assert code == 1
    (run,) = list(tmp_path.iterdir())
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "diverged" and "lower the learning rate" in status["message"]


@pytest.mark.slow
def test_python_dash_m_lab_shows_progress(tmp_path):
    out = subprocess.run([sys.executable, "-m", "lab", "train", "configs/spiral.yaml", "model.depth=2",
                          "data.n=256", "train.epochs=50", "train.max_steps=12", "--runs-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "12/12" in out.stderr and "run folder:" in out.stderr
