"""``python -m lab probe``: a table and analysis/probe.json for a good run, exit 2 and one clear line otherwise."""

import json
import shutil

import pytest

from lab.cli import main


@pytest.fixture(scope="module")
def run_path(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    assert main(["train", "configs/ra_fc_digits.yaml", "train.engine=loader", "train.epochs=2", "data.workers=0",
                 "--runs-dir", str(runs), "--no-progress"]) == 0
    (path,) = list(runs.iterdir())
    return path


def copy_of(run_path, tmp_path):
    return shutil.copytree(run_path, tmp_path / "runs" / run_path.name)


def test_probe_of_a_good_run_prints_a_table_and_writes_probe_json(run_path, tmp_path, capsys):
    runs = copy_of(run_path, tmp_path).parent
    assert main(["probe", run_path.name, "--runs-dir", str(runs), "--epochs", "30", "--device", "cpu"]) == 0
    out, err = capsys.readouterr()
    summary = json.loads((runs / run_path.name / "analysis" / "probe.json").read_text())
    assert summary["top1"] >= 0.8 and summary["layer"] == "bottleneck" and summary["epochs"] == 30
    assert f"Linear probe of bottleneck (forward_features) at step {summary['step']}" in out and "protocol mae" in out
    assert f"top-1           {summary['top1']:.4f}" in out and "1438 train, 359 test" in out
    assert "features extracted" in out and "features bottleneck" in err  # the progress bar of the extraction
    assert f"wrote {runs / run_path.name / 'analysis' / 'probe.json'}" in err

    assert main(["probe", str(runs / run_path.name), "--layer", "blocks.3", "--epochs", "5", "--batch-size", "256",
                 "--lr", "0.1", "--limit", "200", "--checkpoint", "best", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    summary = json.loads((runs / run_path.name / "analysis" / "probe.json").read_text())
    assert (summary["layer"], summary["checkpoint"], summary["n_train"], summary["batch_size"]) == \
        ("blocks.3", "best", 200, 256)
    assert "features blocks.3" not in err
    assert main(["probe", run_path.name, "--runs-dir", str(runs), "--epochs", "5", "--no-progress"]) == 0
    assert "features read from cache" in capsys.readouterr().out


def test_probe_of_a_missing_run_is_exit_2(tmp_path, capsys):
    assert main(["probe", "no-such-run", "--runs-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith(f"error: no run 'no-such-run': not a run id in {tmp_path}")


def test_probe_of_a_corrupt_checkpoint_is_exit_2(run_path, tmp_path, capsys):
    run = copy_of(run_path, tmp_path)
    (run / "checkpoints" / "last.pt").write_bytes(b"\x00garbage, not a checkpoint")
    assert main(["probe", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: checkpoint ") and "last.pt is corrupt or not a lab checkpoint" in err
    assert not (run / "analysis" / "probe.json").exists()


def test_probe_of_a_run_whose_data_are_gone_is_exit_2(run_path, tmp_path, capsys):
    run = copy_of(run_path, tmp_path)
    config = json.loads((run / "config.json").read_text())
    config["config"]["data"].update(name="image_folder", root=str(tmp_path / "moved-away"))
    (run / "config.json").write_text(json.dumps(config))
    assert main(["probe", str(run), "--no-progress"]) == 2
    assert capsys.readouterr().err.startswith(f"error: no images found under {tmp_path / 'moved-away'}")


@pytest.mark.parametrize(("args", "message"), [
    (["--epochs", "0"], "error: --epochs must be >= 1"),
    (["--batch-size", "1"], "error: --epochs must be >= 1, --batch-size and --limit >= 2"),
    (["--layer", "blocks.99"], "error: layer blocks.99 is out of range: this fc_resnet has 8 blocks, blocks.0 to "
                               "blocks.7"),
    (["--layer", "stem"], "error: unknown layer 'stem'; valid: bottleneck or blocks.N"),
])
def test_probe_with_bad_arguments_is_exit_2(run_path, args, message, capsys):
    assert main(["probe", str(run_path), "--no-progress", *args]) == 2
    assert capsys.readouterr().err.startswith(message)
    assert not (run_path / "analysis" / "probe.json").exists()


def test_probe_on_a_device_this_machine_lacks_is_a_usage_error(run_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["probe", str(run_path), "--no-progress", "--device", "tpu9"])
    assert exited.value.code == 2 and "argument --device: unknown device 'tpu9'" in capsys.readouterr().err
    assert not (run_path / "analysis" / "probe.json").exists()


def test_probe_checkpoint_choice_is_checked_by_the_parser(run_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["probe", str(run_path), "--checkpoint", "first"])
    assert exit_info.value.code == 2 and "invalid choice: 'first'" in capsys.readouterr().err
