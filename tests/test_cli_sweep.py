"""``python -m lab sweep``: a folder of ordinary run folders, sweep.json, and exit statuses."""

import json

import pytest

from lab.cli import main
from lab.config import config_of_run, load_config
from lab.runs.store import Run
from lab.train import build_model
from lab.train.checkpoint import load_checkpoint

SMALL = ["model.depth=3", "model.width=8", "data.n=512", "train.epochs=100", "train.max_steps=10",
         "train.eval_every=5"]


def sweep(tmp_path, *overrides, progress=False):
    return main(["sweep", "configs/spiral.yaml", *SMALL, *overrides, "--runs-dir", str(tmp_path),
                 *([] if progress else ["--no-progress"])])


def test_sweep_writes_one_ordinary_run_per_member(tmp_path, capsys):
    assert sweep(tmp_path, "model.shortcut=linear", "model.alpha_min=1.0,0.8,0.6,0.5", progress=True) == 0
    (folder,) = list(tmp_path.iterdir())
    assert folder.name.endswith("-spiral-sweep")
    info = json.loads((folder / "sweep.json").read_text())
    assert info["swept"] == {"model.alpha_min": [1.0, 0.8, 0.6, 0.5]}
    assert info["groups"] == [[0, 1, 2, 3]]  # one ensemble
    names = [m["run"] for m in info["members"]]
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == sorted(names)
    for member, alpha_min in zip(info["members"], [1.0, 0.8, 0.6, 0.5], strict=True):
        run = Run(folder / member["run"])
        assert member["values"] == {"model.alpha_min": alpha_min} and member["state"] == "completed"
        cfg = config_of_run(run)
        assert cfg == load_config("configs/spiral.yaml", [*SMALL, "model.shortcut=linear",
                                                          f"model.alpha_min={alpha_min}"])
        assert run.read_status()["state"] == "completed"
        model = build_model(cfg)
        model.load_state_dict(load_checkpoint(run, "last")["model"])
        assert model.blocks[-1].alpha == pytest.approx(alpha_min)
    err = capsys.readouterr().err
    assert f"sweep folder: {folder} (4 members in 1 ensemble)" in err
    assert err.count("completed  test_acc=") == 4


def test_two_lists_sweep_their_product(tmp_path):
    assert sweep(tmp_path, "model.alpha_min=1.0,0.5", "model.shortcut=linear", "train.seed=0,1,2") == 0
    (folder,) = list(tmp_path.iterdir())
    members = json.loads((folder / "sweep.json").read_text())["members"]
    assert [(m["values"]["model.alpha_min"], m["values"]["train.seed"]) for m in members] == [
        (1.0, 0), (1.0, 1), (1.0, 2), (0.5, 0), (0.5, 1), (0.5, 2)]
    for m in members:
        cfg = config_of_run(Run(folder / m["run"]))
        assert (cfg.model.alpha_min, cfg.train.seed) == (m["values"]["model.alpha_min"], m["values"]["train.seed"])


@pytest.mark.parametrize(("overrides", "message"), [
    (["model.alpha_min=1.0,2"], "model.alpha_min must be in [0.0, 1.0]; got 2"),
    (["model.dpeth=2,3"], "unknown key model.dpeth"),
    (["model.alpha_min=0.5"], "nothing to sweep"),
    (["model.name=ra_type1", "data.name=digits", "model.seed=0,1"], "residual_mlp"),
])
def test_bad_input_is_exit_2_and_writes_nothing(tmp_path, capsys, overrides, message):
    assert sweep(tmp_path, *overrides) == 2
    assert message in capsys.readouterr().err
    assert not tmp_path.exists() or not list(tmp_path.iterdir())


def test_missing_config_is_exit_2(tmp_path, capsys):
    assert main(["sweep", "no/such.yaml", "model.alpha_min=1.0,0.5", "--runs-dir", str(tmp_path)]) == 2
    assert "config file not found" in capsys.readouterr().err


def test_divergence_is_reported_and_only_all_diverged_fails(tmp_path, capsys):
    assert sweep(tmp_path / "some", "train.optimizer=sgd", "train.lr=0.05,50") == 0
    err = capsys.readouterr().err
    assert "diverged" in err and "completed  test_acc=" in err
    assert sweep(tmp_path / "all", "train.optimizer=sgd", "train.lr=40,50") == 1


def test_a_sweep_whose_data_cannot_train_is_refused_before_its_folder(tmp_path, capsys):
    assert main(["sweep", "configs/spiral.yaml", "data.train_fraction=1.0", "model.alpha_min=1.0,0.5",
                 "--runs-dir", str(tmp_path / "runs"), "--no-progress"]) == 2
    assert "leaves no test samples" in capsys.readouterr().err and not (tmp_path / "runs").exists()
