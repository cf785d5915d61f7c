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
                                                           "train.epochs=100", "train.max_steps=30",
                                                           "train.engine=tensor"])  # the engine, decided
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


@pytest.fixture(scope="module")
def trained_digits_run(tmp_path_factory):
    """The Residual Alignment FC ResNet on digits, trained briefly by the CLI (with alignment snapshots)."""
    runs = tmp_path_factory.mktemp("runs")
    assert main(["train", "configs/ra_fc_digits.yaml", "model.depth=3", "model.width=32", "train.epochs=8",
                 "--runs-dir", str(runs), "--no-progress", "--snapshot-every", "40"]) == 0
    (run,) = list(runs.iterdir())
    return run


def test_cli_trains_an_image_model_with_alignment_snapshots(trained_digits_run):
    run = trained_digits_run
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "completed" and status["metrics"]["test_acc"] > 0.8
    saved = json.loads((run / "config.json").read_text())["config"]
    assert saved["model"] == {"name": "fc_resnet", "depth": 3, "width": 32, "shortcut": "identity", "seed": 0}
    snaps = sorted(p.name for p in (run / "snapshots").iterdir())
    assert snaps and all(n.startswith("alignment-") for n in snaps)
    lrs = [r["lr"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "lr" in r]
    assert lrs[0] > lrs[-1] > 0, "cosine decay"


def test_cli_analyze_alignment_writes_the_report(trained_digits_run, capsys):
    run = trained_digits_run
    assert main(["analyze", "alignment", str(run), "--inputs", "16", "--k", "20"]) == 0
    out = capsys.readouterr().out
    assert "RA2 alignment score" in out and "RA4 1/sigma_1 slope" in out
    report = json.loads((run / "analysis" / "alignment.json").read_text())
    for key in ("align_offdiag", "baseline_mean", "topk_ratio", "inv_sigma1_slope", "inv_sigma1_r2",
                "straightness", "spacing_cv", "nc1", "nc2_equinorm", "nc3", "nc4", "sigma1", "inv_sigma"):
        assert key in report, key
    assert report["k"] == 20 and report["inputs"] == 16 and report["num_classes"] == 10
    assert report["ra4_fit_from"] == 2 and report["ra4_fit_to"] == 3  # 3 blocks: the last two
    assert "RA4 1/sigma_1 slope, blocks 2-3" in out and "over 6 pairs" in out
    assert report["topk_ratio"] is not None and report["reasons"] == {}, "K = 2C: RA3's top 10 against the next 10"
    lo, hi = report["align_offdiag_ci"]
    assert lo <= report["align_offdiag"] <= hi and f"[{lo:.4g}, {hi:.4g}]" in out
    assert report["nc2_maxangle"][-1] is not None and report["nc2_w_equiangular"][-1] is not None
    assert len(report["nc1"]) == 4 and len(report["inv_sigma"]) == 3
    assert 0 <= report["align_offdiag"] <= 1 and 0 <= report["baseline_mean"] <= 1
    import numpy as np

    arrays = np.load(run / "analysis" / "alignment.npz")
    assert arrays["sigma"].shape == (3, 20) and arrays["grid"].shape == (1, 3, 3, 20, 20)
    assert report["sigma1"] == pytest.approx(arrays["sigma"][:, 0].tolist())


def test_cli_analyze_rank_names_each_column_for_its_matrix_eq6_first(trained_digits_run, capsys):
    """The rank report's "effective rank" is Roy & Vetterli's on the uncentred features, not Eq. 6's spectrum: each
    column says which matrix it is taken on, Eq. 6's entropy and its exp(H) first."""
    import numpy as np

    run = trained_digits_run
    assert main(["analyze", "rank", str(run), "--inputs", "64"]) == 0
    out = capsys.readouterr().out
    report = json.loads((run / "analysis" / "layer_rank.json").read_text())
    assert list(report)[:3] == ["eq6_entropy", "eq6_rank", "effective_rank"]
    np.testing.assert_allclose(report["eq6_rank"], np.exp(report["eq6_entropy"]), rtol=1e-5)
    assert not np.allclose(report["eq6_rank"], report["effective_rank"], rtol=1e-2), "two matrices, two ranks"
    lines = [line for line in out.splitlines() if line.startswith("  ")]
    assert lines[0].startswith("  Eq. 6 entropy H of the sample covariance's spectrum (nats):")
    assert lines[1].startswith("  Eq. 6 rank exp(H), the same spectrum:")
    assert lines[2].startswith("  effective rank of the uncentred features [n, D]:")


def test_cli_analyze_collapse_follows_neural_collapse_over_the_kept_checkpoints(tmp_path, capsys):
    """Figure 7 of Residual Alignment from a run folder: NC1–NC4 of the last layer at every checkpoint the run kept
    and at last, each equal to the metrics of that checkpoint's weights."""
    import torch

    from lab.analysis.residual_alignment import collapse_of
    from lab.reports.alignment import load_trained
    from lab.runs.store import Run

    runs = tmp_path / "runs"
    assert main(["train", "configs/ra_fc_digits.yaml", "model.depth=3", "model.width=32", "train.epochs=4",
                 "train.save_every=11", "--runs-dir", str(runs), "--no-progress"]) == 0
    (folder,) = list(runs.iterdir())
    assert main(["analyze", "collapse", str(folder), "--nc-inputs", "200"]) == 0
    assert "wrote" in capsys.readouterr().err
    report = json.loads((folder / "analysis" / "collapse.json").read_text())
    steps = [point["step"] for point in report["curve"]]
    # the network at initialisation, then 4 epochs of 12 steps: 48 is `last`
    assert steps == [0, 11, 22, 33, 44, 48] and report["nc_inputs"] == 200
    assert report["curve"][-1]["nc1"] < report["curve"][1]["nc1"] < report["curve"][0]["nc1"]  # collapse as it trains
    _, model, data, _ = load_trained(Run(folder), "step-000000022")
    expected = collapse_of(model, data.x_train[:200], data.y_train[:200])
    assert report["curve"][2]["nc3"] == pytest.approx(float(expected["nc3"][-1]))
    assert torch.isfinite(torch.tensor([report["curve"][2][k] for k in ("nc1", "nc2_equinorm", "nc4")])).all()


def test_cli_analyze_says_what_is_wrong(trained_digits_run, tmp_path, capsys):
    assert main(["analyze", "alignment", "nope", "--runs-dir", str(tmp_path)]) == 2
    assert "no run 'nope'" in capsys.readouterr().err
    broken = tmp_path / "broken"
    subprocess.run(["cp", "-r", str(trained_digits_run), str(broken)], check=True)
    (broken / "checkpoints" / "last.pt").write_bytes(b"not a checkpoint")
    assert main(["analyze", "alignment", str(broken)]) == 2
    assert "corrupt or not a lab checkpoint" in capsys.readouterr().err
    assert main(["analyze", "alignment", str(trained_digits_run), "--inputs", "1"]) == 2


def test_a_config_that_needs_an_extra_not_installed_is_refused_before_any_run_folder(tmp_path, monkeypatch, capsys):
    diffusion = ("torchmetrics", "torch_fidelity", "diffusers")  # the [diffusion] extra, as if not installed
    for name in [*diffusion, *(n for n in sys.modules if n.split(".")[0] in diffusion)]:
        monkeypatch.setitem(sys.modules, name, None)
    runs = tmp_path / "runs"
    assert main(["train", "uvit_tiny_digits", "train.fd_samples=16", "--runs-dir", str(runs)]) == 2  # digits-FD
    err = capsys.readouterr().err
    assert 'needs the [diffusion] extra: pip install "residual-lab[diffusion]"' in err and "Traceback" not in err
    assert not runs.exists() or not any(runs.iterdir())


def test_serve_refuses_a_port_out_of_range_before_starting_anything(capsys):
    assert main(["serve", "--port", "70000"]) == 2
    assert "--port must be in 0..65535" in capsys.readouterr().err
    assert main(["serve", "--max-jobs", "0"]) == 2


TINY = ["configs/spiral.yaml", "model.depth=2", "model.width=4", "data.n=128", "train.batch_size=32",
        "train.max_steps=2", "--no-progress"]


@pytest.mark.parametrize("override, message", [
    ("train.seed=99999999999999999999", "train.seed must be in [0, 4294967295]; got 99999999999999999999"),
    ("train.seed=4294967296", "train.seed must be in [0, 4294967295]; got 4294967296"),
    ("train.seed=-1", "train.seed must be in [0, 4294967295]; got -1"),
    ("model.seed=99999999999999999999", "model.seed must be in [0, 4294967295]"),
    ("data.seed=99999999999999999999", "data.seed must be in [0, 4294967295]"),
    ("train.seed=1.5", "train.seed must be an integer; got 1.5"),
    ("train.device=tpu", "train.device must be auto, cpu, cuda, cuda:N or mps; got 'tpu'"),
    ("train.device=cuda:x", "train.device must be auto, cpu, cuda, cuda:N or mps; got 'cuda:x'"),
    ("train.device=cuda:99", "train.device=cuda:99: "),
])
def test_a_seed_or_device_this_machine_cannot_use_is_refused_before_any_run_folder(tmp_path, capsys, override,
                                                                                    message):
    """The attack: a seed beyond what numpy and torch accept, or a device this machine lacks, trained into a new run
    folder and failed there with a traceback. Each is refused first, with the key and the reason."""
    runs = tmp_path / "runs"
    assert main(["train", *TINY, override, "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not runs.exists() or not any(runs.iterdir())


def test_the_largest_seeds_train(tmp_path, capsys):
    seeds = [f"{key}.seed={2**32 - 1}" for key in ("model", "data", "train")]
    assert main(["train", *TINY, *seeds, "--runs-dir", str(tmp_path)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("command", [["sample", "run", "--seed", "-1"], ["latents", "images", "--vae", "v", "--out",
                                                                         "o", "--seed", str(2**64)],
                                     ["analyze", "alignment", "run", "--device", "tpu"],
                                     ["sample", "run", "--device", "cuda:99"]])
def test_a_seed_or_device_option_out_of_range_is_a_usage_error(tmp_path, capsys, command):
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--runs-dir", str(tmp_path)] if command[0] != "latents" else command)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and ("--seed" in err or "--device" in err) and "Traceback" not in err
    assert not any(tmp_path.iterdir())
