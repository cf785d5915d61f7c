"""A Hugging Face ``save_pretrained`` folder imported as a run (``--model hf:DIR``): a GPT-2 read on a text the test
writes, by the tokenizer saved beside it, token position by token position; a ViT given the digits as its
preprocessor says; the folder's weights file recorded by hash and loaded by transformers; every refusal before a run
folder is made."""

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

transformers = pytest.importorskip("transformers")

import lab  # noqa: E402
from lab.analysis.token_jacobian import spread_positions  # noqa: E402
from lab.jobs.manager import JobManager  # noqa: E402
from lab.nn.hf import load_pretrained  # noqa: E402
from lab.reports.alignment import load_trained  # noqa: E402
from lab.reports.imported import import_weights  # noqa: E402
from lab.runfolder import layout  # noqa: E402
from lab.runs.store import CheckpointError, RunStore  # noqa: E402
from lab.train.checkpoint import load_checkpoint  # noqa: E402
from lab.ui.pages.runs import RunsPage  # noqa: E402
from tests.reports.hf_folders import saved_gpt2, saved_vit, text_file  # noqa: E402
from tests.ui.driving import shown  # noqa: E402


def _cli(tmp_path, *args):
    env = {**os.environ, "LAB_RUNS_DIR": str(tmp_path / "runs"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)


def _folders(tmp_path) -> list:
    runs = tmp_path / "runs"
    return sorted(p.name for p in runs.iterdir()) if runs.exists() else []


def test_spread_positions_end_at_the_last_token():
    assert spread_positions(128) == [31, 63, 95, 127]
    assert spread_positions(3) == [0, 1, 2] and spread_positions(1) == [0]


def test_a_gpt2_is_analysed_token_by_token_on_a_text_into_a_run_the_runs_page_opens(tmp_path):
    text = text_file(tmp_path)
    folder, model = saved_gpt2(tmp_path, text)
    done = _cli(tmp_path, "analyze", "alignment", "--model", f"hf:{folder}", "--data", f"text={text}",
                "--set", "data.tokens=16", "--inputs", "3", "--k", "8", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "windows of 16 tokens" in done.stdout and "at token positions 4, 8, 12, 16" in done.stdout
    assert "C = none" in done.stdout and "no classes (a language model)" in done.stdout  # RA3 says why it is n/a
    (name,) = _folders(tmp_path)
    run = RunStore(tmp_path / "runs").open(name)
    record = {**run.read_config(), "imported": run.config_record()["imported"]}
    weights = folder / "model.safetensors"
    assert record["imported"]["weights"] == str(weights) and record["imported"]["keys"] == "every key matched"
    assert record["imported"]["data_classes"] is None and record["imported"]["head_classes"] is None
    assert record["data"]["tokenizer"] == str(folder) and record["model"]["config"]["n_layer"] == 2
    assert not any(p.suffix in (".safetensors", ".pt") for p in run.path.rglob("*"))  # no copy of the weights
    summary = json.loads(run.analysis_path(layout.ALIGNMENT).read_text())
    assert summary["positions"] == [3, 7, 11, 15] and summary["num_classes"] == 0 and summary["k"] == 8
    assert summary["align_offdiag"] is not None and len(summary["inv_sigma"]) == 4  # 2 layers: 4 residual steps
    _, view, data, _ = load_trained(run)  # the run's network is the saved one: the model's own logits
    with torch.no_grad():
        torch.testing.assert_close(view(data.x_test[:2]), model(data.x_test[:2]).logits[:, -1], atol=1e-5, rtol=1e-5)
    assert data.x_test.shape[1] == 16 and torch.equal(data.y_test, data.y_test.long())
    manager = JobManager(tmp_path / "runs", max_jobs=1)
    try:
        page = RunsPage(manager=manager, run=run.id)
        header = shown(page.details.header)
        assert run.id in header and "completed" in header and "imported" in header
        assert "n_layer" in shown(page.details.config)  # the network's config, as text
    finally:
        manager.shutdown()


def test_a_vit_is_given_the_digits_as_its_preprocessor_says_and_loaded_by_transformers(tmp_path):
    folder, model = saved_vit(tmp_path)
    result = lab.analyze(f"hf:{folder}", analyses=("alignment", "rank"), inputs=4, k=8,
                         runs_dir=tmp_path / "runs")
    record = result.run.config_record()["imported"]
    assert record["inputs"] == ("digits 8 px → 3 × 32 × 32, grayscale repeated, normalised with the model's mean/std "
                                "(the model's preprocessor_config.json)")
    assert record["head_classes"] == record["data_classes"] == 10 and record["keys"] == "every key matched"
    assert result.summary["num_classes"] == 10 and result.summary["positions"] is None
    assert len(result.rank["eq6_rank"]) == 5
    # its saved keys (encoder.layer.*) are not its modules' (layers.*): transformers converts them, as it loads
    assert any(".encoder.layer." in k for k in load_file(folder / "model.safetensors"))
    _, view, data, _ = load_trained(result.run)
    stage, x = view.input_stage, data.x_test[:2]
    assert stage.channels == 3 and stage.size == 32 and stage.mean.flatten().tolist() == [0.5] * 3
    assert stage.std.flatten().tolist() == [0.25] * 3
    with torch.no_grad():  # the network after its input stage is the saved model itself
        torch.testing.assert_close(view(x), model(stage(x)).logits, atol=1e-5, rtol=1e-5)
    assert torch.equal(load_checkpoint(result.run)["model"]["model.vit.layers.0.attention.q_proj.weight"],
                       load_pretrained(folder).vit.layers[0].attention.q_proj.weight)
    (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(CheckpointError, match="has changed since the network was imported"):
        load_checkpoint(result.run)


def test_a_tensor_the_file_lacks_is_refused_or_named_with_strict_false(tmp_path):
    folder, model = saved_vit(tmp_path, channels=1, side=8)
    state = load_file(folder / "model.safetensors")
    state.pop("classifier.bias")
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    store = RunStore(tmp_path / "runs")
    with pytest.raises(ValueError, match="1 missing from the file: classifier.bias"):
        import_weights(store, f"hf:{folder}", None)
    assert _folders(tmp_path) == []
    run, report = import_weights(store, f"hf:{folder}", None, strict=False)
    assert report.initialised == ["classifier.bias"] == run.config_record()["imported"]["initialised"]
    state = load_checkpoint(run)["model"]
    assert torch.equal(state["model.classifier.weight"], model.classifier.weight)


def test_what_cannot_be_read_is_refused_before_any_run_folder(tmp_path):
    text = text_file(tmp_path, words=25)
    folder, _ = saved_vit(tmp_path, channels=1, side=8)
    store = RunStore(tmp_path / "runs")
    with pytest.raises(ValueError, match="read by a language model's own tokenizer"):
        import_weights(store, f"hf:{folder}", None, {"data.name": "text", "data.root": str(text)})
    remote = tmp_path / "remote"
    remote.mkdir()
    config = json.loads((folder / "config.json").read_text())
    (remote / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "x.Y"}}))
    with pytest.raises(ValueError, match="names remote code"):
        import_weights(store, f"hf:{remote}", None)
    (remote / "config.json").write_text(json.dumps(config))
    (remote / "model.safetensors.index.json").write_text("{}")
    with pytest.raises(ValueError, match="in shards"):
        import_weights(store, f"hf:{remote}", None)
    (remote / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    with pytest.raises(ValueError, match="transformers 'bert' model"):
        import_weights(store, f"hf:{remote}", None)
    with pytest.raises(FileNotFoundError, match="holds no config.json"):
        import_weights(store, f"hf:{tmp_path / 'nothing'}", None)
    gpt, _ = saved_gpt2(tmp_path, text_file(tmp_path))
    with pytest.raises(ValueError, match="one window of 16 tokens"):
        import_weights(store, f"hf:{gpt}", None, {"data.name": "text", "data.root": str(text), "data.tokens": 16})
    with pytest.raises(ValueError, match="is a language model: it is analysed on text, --data text=FILE"):
        import_weights(store, f"hf:{gpt}", None)
    with pytest.raises(ValueError, match="reads at most 64 tokens"):
        import_weights(store, f"hf:{gpt}", None, {"data.name": "text", "data.root": str(text), "data.tokens": 65})
    assert _folders(tmp_path) == []
