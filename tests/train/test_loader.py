"""The loader engine on one process: its optimiser maths, exact resume, ResidualDroppath on a timm ResNet50d, and
bad input that stops before anything is written."""

import json
import math

import pytest
import torch

from lab.cli import main
from lab.config import ExperimentConfig, apply_overrides, load_config
from lab.data.formats import make_synthetic_image_folder
from lab.nn.droppath import DropPath
from lab.train.build import build_model, loader_data
from lab.train.core import drop_paths
from lab.train.distributed import World
from lab.train.loader import LoaderTrainer, ResumeMismatch


def _trainer(overrides: dict, callbacks=()) -> LoaderTrainer:
    cfg = apply_overrides(ExperimentConfig(), {"data.n": 512, "model.depth": 4, "model.width": 16,
                                                "train.engine": "loader", "data.workers": 0, **overrides})
    data = loader_data(cfg)
    return LoaderTrainer(build_model(cfg, data), data, cfg.train, cfg.data, World(), callbacks)


def test_learning_rate_scales_with_the_global_batch_and_warms_up_over_epochs():
    t = _trainer({"train.batch_size": 32, "train.accum_steps": 2, "train.lr": 1e-3, "train.lr_scaling": "batch256",
                  "train.lr_schedule": "warmup_cosine", "train.warmup_epochs": 1, "train.epochs": 4})
    assert t.global_batch == 64 and t.peak_lr == pytest.approx(1e-3 * 64 / 256)
    assert t.steps_per_epoch == (409 // 32) // 2 and t.warmup == t.steps_per_epoch
    t.fit(steps=1)
    assert t.optimizer.param_groups[0]["lr"] == pytest.approx(t.peak_lr / t.warmup)  # (s + 1) / W of the peak


def test_accumulated_micro_batches_make_the_update_of_one_large_batch():
    """Two micro-batches of 16 see the same 32 samples as one batch of 32 (the sampler's first keys) and, with no
    batch-dependent layer, give the same gradient: the same parameters after a step."""
    small = _trainer({"train.batch_size": 16, "train.accum_steps": 2})
    large = _trainer({"train.batch_size": 32})
    small.fit(steps=1)
    large.fit(steps=1)
    for a, b in zip(small.model.parameters(), large.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=2e-6, rtol=1e-5)


def _steps(run) -> list[tuple[int, float]]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in records if r["kind"] == "step"]


def test_a_run_stopped_and_resumed_continues_with_the_losses_of_an_uninterrupted_one(tmp_path):
    args = ["configs/ra_fc_digits.yaml", "train.engine=loader", "train.max_steps=12", "train.log_every=1",
            "data.workers=0", "--no-progress"]
    assert main(["train", *args, "--runs-dir", str(tmp_path / "a")]) == 0
    assert main(["train", *args, "--runs-dir", str(tmp_path / "b"), "--steps", "5"]) == 0
    (a,), (b,) = (list((tmp_path / d).iterdir()) for d in ("a", "b"))
    assert json.loads((b / "status.json").read_text())["state"] == "stopped"
    assert main(["resume", str(b), "--no-progress"]) == 0
    assert json.loads((b / "status.json").read_text())["state"] == "completed"
    assert _steps(b) == _steps(a) and len(_steps(a)) == 12  # every loss, bit for bit


def test_residual_droppath_alternates_on_a_timm_resnet50d(tmp_path):
    root = make_synthetic_image_folder(tmp_path / "imgs", classes=3, per_class=4, size=32)
    cfg = load_config(None, {"model.name": "timm_resnet50d", "data.name": "image_folder", "data.root": str(root),
                             "data.image_size": 32, "data.workers": 0, "train.engine": "loader",
                             "train.batch_size": 4, "train.optimizer": "sgd", "train.lr": 0.01,
                             "train.droppath": "residual_droppath", "train.drop_path_rate": 0.5})
    data = loader_data(cfg)
    t = LoaderTrainer(build_model(cfg, data), data, cfg.train, cfg.data, World())
    drops = drop_paths(t.model)
    assert len(drops) == 15  # every block but the first (timm's linear rule gives it rate 0)
    before = [p.detach().clone() for p in t.model.parameters()]
    t.fit(steps=1)  # even step: sample and remember per-sample keep masks
    masks = [d.mask.clone() for d in drops]
    assert all(d.mode == "rdp_drop" for d in drops) and any((m == 0).any() for m in masks)
    t.fit(steps=1)  # odd step: the same masks, the dropped branches trained
    assert all(d.mode == "rdp_train" for d in drops)
    assert all(torch.equal(d.mask, m) for d, m in zip(drops, masks, strict=True))
    assert t.step == 2 and math.isfinite(t.evaluate()["test_loss"])
    assert any(not torch.equal(p, q) for p, q in zip(t.model.parameters(), before, strict=True))


def test_a_missing_image_folder_is_an_error_before_any_folder_is_made(tmp_path, capsys):
    code = main(["train", "configs/ra_fc_digits.yaml", "train.engine=loader", "data.name=image_folder",
                 f"data.root={tmp_path / 'nowhere'}", "--runs-dir", str(tmp_path / "runs")])
    assert code == 2 and "no images found" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_diverging_loader_run_says_so_and_keeps_its_folder(tmp_path, capsys):
    code = main(["train", "configs/ra_fc_digits.yaml", "train.engine=loader", "train.lr=100", "data.workers=0",
                 "train.optimizer=sgd", "--runs-dir", str(tmp_path), "--no-progress"])
    (run,) = tmp_path.iterdir()
    status = json.loads((run / "status.json").read_text())
    assert code == 1 and status["state"] == "diverged" and "lower the learning rate" in status["message"]


def test_droppath_modules_are_found_once():
    t = _trainer({"train.droppath": "droppath", "train.drop_path_rate": 0.1})
    drops = drop_paths(t.model)
    assert drops and len(drops) == len({id(d) for d in drops}) and all(isinstance(d, DropPath) for d in drops)


def test_a_checkpoint_of_another_global_batch_is_refused_with_the_processes_to_use():
    a = _trainer({"train.batch_size": 16})
    a.fit(steps=1)
    b = _trainer({"train.batch_size": 32})
    with pytest.raises(ResumeMismatch, match="trained with a global batch of 16"):
        b.load_state_dict(a.state_dict())
    c = _trainer({"train.batch_size": 16})
    c.load_state_dict(a.state_dict())
    assert c.step == 1


def test_a_stop_file_left_by_an_earlier_stop_does_not_stop_the_resumed_run(tmp_path):
    args = ["configs/ra_fc_digits.yaml", "train.engine=loader", "train.max_steps=6", "data.workers=0", "--no-progress"]
    assert main(["train", *args, "--runs-dir", str(tmp_path), "--steps", "2"]) == 0
    (run,) = tmp_path.iterdir()
    (run / "STOP").touch()  # how a user stops a run by hand; the stop happened, the file stays
    assert main(["resume", str(run), "--no-progress"]) == 0
    assert json.loads((run / "status.json").read_text())["state"] == "completed" and not (run / "STOP").exists()


def test_loader_settings_on_the_tensor_engine_are_refused(tmp_path, capsys):
    code = main(["train", "configs/spiral.yaml", "train.accum_steps=2", "--runs-dir", str(tmp_path)])
    assert code == 2 and "setting of the loader engine" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # refused before any folder was made


def test_label_smoothing_is_timms_loss_and_a_loader_setting(tmp_path, capsys):
    trainer = _trainer({"train.label_smoothing": 0.1})
    logits, y = torch.randn(6, 2), torch.tensor([0, 1, 1, 0, 1, 0])
    logp = logits.log_softmax(dim=1)
    expected = (0.9 * -logp.gather(1, y[:, None]).squeeze(1) + 0.1 * -logp.mean(dim=1)).mean()
    torch.testing.assert_close(trainer.criterion(logits, y), expected)
    assert _trainer({}).criterion is torch.nn.functional.cross_entropy
    code = main(["train", "configs/spiral.yaml", "train.label_smoothing=0.1", "--runs-dir", str(tmp_path)])
    assert code == 2 and "setting of the loader engine" in capsys.readouterr().err


def test_table_1_configs_carry_the_timm_defaults_they_claim():
    for name in ("resnet50d_rdp_in1k", "resnet50d_rdp_cifar10", "resnet50_rdp_mnist"):
        cfg = load_config(f"configs/{name}.yaml")
        assert cfg.train.label_smoothing == 0.1 and cfg.model.get("zero_init") is True, name
        assert (cfg.train.optimizer, cfg.train.lr, cfg.train.weight_decay, cfg.train.warmup_epochs) == \
            ("sgd", 0.1, 2e-5, 5), name
    assert load_config("configs/resnet50d_rdp_in1k.yaml").data.augment == "timm"
    from lab.nn.registry import create_model

    model = load_config("configs/resnet50_rdp_mnist.yaml").model
    net = create_model(model.name, num_classes=10, in_chans=1, **model.builder_kwargs())
    last_norms = [m.bn3 for m in net.modules() if hasattr(m, "bn3")]  # timm's zero_init_last: each block's last norm
    assert len(last_norms) == 16 and not any(bn.weight.any() for bn in last_norms)


TINY_UVIT = ["configs/uvit_tiny_digits.yaml", "model.embed_dim=16", "model.depth=2", "model.num_heads=2",
             "train.batch_size=32", "train.max_steps=10", "train.eval_every=5", "train.warmup_steps=2",
             "train.samples=4", "train.sample_steps=3", "train.log_every=1", "--no-progress"]


def test_a_diffusion_run_records_samples_and_resumes_with_its_moving_average_exactly(tmp_path):
    """The ε-loss and held-out loss are recorded, a sample grid at each evaluation, the EMA weights in every
    checkpoint; a run stopped and resumed continues with the same losses and ends with the same average."""
    assert main(["train", *TINY_UVIT, "--runs-dir", str(tmp_path / "a")]) == 0
    assert main(["train", *TINY_UVIT, "--runs-dir", str(tmp_path / "b"), "--steps", "4"]) == 0
    (a,), (b,) = (list((tmp_path / d).iterdir()) for d in ("a", "b"))
    assert main(["resume", str(b), "--no-progress"]) == 0
    assert _steps(b) == _steps(a) and len(_steps(a)) == 10
    evals = [json.loads(line) for line in (a / "metrics.jsonl").read_text().splitlines() if '"eval"' in line]
    assert [e["step"] for e in evals] == [5, 10] and all(math.isfinite(e["test_loss"]) for e in evals)
    assert sorted(p.name for p in (a / "figures").iterdir()) == ["samples-000000005.png", "samples-000000010.png"]
    (ea, ma), (eb, mb) = ((s["ema"], s["model"]) for s in
                          (torch.load(r / "checkpoints" / "last.pt", weights_only=True) for r in (a, b)))
    assert ea.keys() == ma.keys() and all(torch.equal(ea[k], eb[k]) and torch.equal(ma[k], mb[k]) for k in ea)
    assert any(not torch.equal(ea[k], ma[k]) for k in ea)  # the average lags the weights


def test_a_discrete_schedule_run_samples_with_dpm_solver_and_refuses_another_sampler_before_any_folder(tmp_path,
                                                                                                        capsys):
    from lab.reports.samples import sample_report
    from lab.runs.store import Run

    discrete = [*TINY_UVIT, "model.schedule=discrete", "train.max_steps=5", "--runs-dir", str(tmp_path)]
    assert main(["train", *discrete]) == 2  # the config's sampler is the VP-SDE's
    assert "train.sampler=ode does not sample the discrete schedule" in capsys.readouterr().err
    assert not tmp_path.exists() or not list(tmp_path.iterdir())
    assert main(["train", *discrete, "train.sampler=dpm_solver"]) == 0
    (run,) = tmp_path.iterdir()
    assert [p.name for p in (run / "figures").iterdir()] == ["samples-000000005.png"]
    summary = sample_report(Run(run), num=2, steps=3, progress=False)  # the run's sampler by default
    assert summary["sampler"] == "dpm_solver" and summary["png"].name == "samples-5-dpm_solver3-ema-seed0.png"


def test_a_global_batch_holds_whatever_the_number_of_processes():
    """train.global_batch divides among micro-batches and processes (the U-ViT reference's 128 on 1 or 8 GPUs)."""
    from lab.train.loader import micro_batch

    cfg = apply_overrides(ExperimentConfig(), {"train.global_batch": 128, "train.accum_steps": 2}).train
    assert [micro_batch(cfg, n) for n in (1, 2, 4, 8)] == [64, 32, 16, 8]
    with pytest.raises(ValueError, match="does not divide into 2 micro-batch"):
        micro_batch(cfg, 3)
    assert micro_batch(apply_overrides(ExperimentConfig(), {"train.batch_size": 48}).train, 8) == 48
    t = _trainer({"train.global_batch": 64, "train.batch_size": 7})
    assert t.batch_size == 64 and t.global_batch == 64 and t.steps_per_epoch == 409 // 64  # data.n 512: 409 train


def test_kept_checkpoints_hold_the_weights_and_lab_fid_selects_the_best(tmp_path, capsys):
    """train.save_every keeps the weights (not the optimiser) at its steps; lab fid --select best scores each with
    --select-num samples and the best again with --num, as the U-ViT reference selects its FID checkpoint."""
    assert main(["train", *TINY_UVIT, "train.save_every=5", "--runs-dir", str(tmp_path)]) == 0
    (run,) = tmp_path.iterdir()
    from lab.runs.store import Run

    assert Run(run).saved_checkpoints() == ["step-000000005", "step-000000010"]
    kept = torch.load(run / "checkpoints" / "step-000000005.pt", weights_only=True)
    assert set(kept) == {"model", "ema", "step"} and kept["step"] == 5
    assert main(["fid", str(run), "--reference", "digits", "--features", "digits-classifier", "--select", "best",
                 "--select-num", "6", "--num", "12", "--steps", "2", "--no-progress"]) == 0
    measurements = json.loads((run / "analysis" / "fid.json").read_text())["measurements"]
    assert [(m["checkpoint"], m["num"]) for m in measurements[:2]] == [("step-000000005", 6), ("step-000000010", 6)]
    final = measurements[-1]
    best = min(measurements[:2], key=lambda m: m["value"])["checkpoint"]
    assert final["checkpoint"] == best and final["num"] == 12 and len(final["selected_from"]) == 2
    assert capsys.readouterr().out.startswith("digits-FD ")
    assert main(["fid", str(tmp_path / run.name), "--reference", "digits", "--features", "digits-classifier",
                 "--checkpoint", "step-000000007", "--num", "4", "--steps", "1", "--no-progress"]) == 2
    assert "no checkpoint at" in capsys.readouterr().err


def test_image_folders_can_be_read_into_minus_one_to_one(tmp_path):
    from lab.config import ConfigError
    from lab.train.build import pixel_scale

    root = make_synthetic_image_folder(tmp_path / "imgs", classes=2, per_class=4, size=8)
    cfg = load_config(None, {"data.name": "image_folder", "data.root": str(root), "data.normalize": "symmetric",
                             "data.image_size": 8, "data.workers": 0, "train.engine": "loader",
                             "model.name": "uvit_tiny", "train.task": "diffusion"})
    x, _ = loader_data(cfg).test[(0, 0)]
    assert x.min() >= -1.0 and x.max() <= 1.0 and pixel_scale(cfg) == ((0.5,) * 3, (0.5,) * 3)
    with pytest.raises(ConfigError, match="data.normalize applies to image folders"):
        load_config(None, {"data.name": "digits", "data.normalize": "symmetric"})
