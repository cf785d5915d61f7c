"""``lab throughput``: the training throughput an installed lab measures for the dry run's GPU-hours."""

import json

from lab.cli import main
from lab.reproduce.estimate import device_kind, read_throughput


def test_throughput_measures_each_model_and_records_what_the_dry_run_reads(tmp_path, capsys):
    record = tmp_path / "throughput.jsonl"
    for what, model, batch in (("mae", "mae_vit_tiny_patch4_32", 4), ("uvit", "uvit_tiny", 4)):
        assert main(["throughput", what, "--model", model, "--batch", str(batch), "--steps", "1", "--repeats", "1",
                     "--record", str(record)]) == 0
        out = capsys.readouterr().out
        assert "plain loop, fp32" in out and "engine step, fp32" in out and f"recorded in {record}" in out
    records = [json.loads(line) for line in record.read_text().splitlines()]
    assert [r["bench"] for r in records] == ["mae_vit_tiny_patch4_32@32", "uvit_tiny@8"]
    assert all(r["images_per_s"] > 0 and r["batch"] == 4 for r in records)
    assert set(read_throughput(record, device_kind())) == {"mae_vit_tiny_patch4_32@32", "uvit_tiny@8"}


def test_throughput_refuses_bad_input_by_name(capsys):
    assert main(["throughput", "mae", "--batch", "0"]) == 2
    assert "--batch" in capsys.readouterr().err
    assert main(["throughput", "uvit", "--model", "no_such_model", "--steps", "1"]) == 2
    assert "no_such_model" in capsys.readouterr().err
