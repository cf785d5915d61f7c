"""Runs side by side: which settings differ, each run's label from them, and their final numbers."""

import math

from lab.config import flatten
from lab.reports.compare import compare_table, differing, final_numbers, metric_fields, run_labels

A = {"name": "a", "model": {"name": "residual_mlp", "alpha_min": 1.0, "seed": 0}, "train": {"lr": 0.01, "seed": 0}}
B = {"name": "b", "model": {"name": "residual_mlp", "alpha_min": 0.7, "seed": 0}, "train": {"lr": 0.01, "seed": 1}}


def test_the_settings_that_differ_name_each_run():
    assert flatten(A)["model.alpha_min"] == 1.0 and "model" not in flatten(A)
    diff = differing([A, B])
    assert diff == {"model.alpha_min": [1.0, 0.7], "train.seed": [0, 1]}  # the runs' names differ too, but say nothing
    assert differing([A, {**A, "model": {**A["model"], "name": "fc_resnet"}}]) == {"model.name": ["residual_mlp",
                                                                                              "fc_resnet"]}
    assert run_labels(["r1", "r2"], diff) == ["alpha_min=1, seed=0", "alpha_min=0.7, seed=1"]
    # model.seed and train.seed share a leaf name: a key both sections set apart is named in full
    both = differing([A, {**B, "model": {**B["model"], "seed": 3}}])
    assert run_labels(["r1", "r2"], both)[1] == "alpha_min=0.7, model.seed=3, train.seed=1"
    assert run_labels(["r1", "r2"], differing([A, A])) == ["r1", "r2"]  # nothing differs: their ids
    lacking = differing([A, {"model": {"name": "residual_mlp"}}])
    assert lacking["model.alpha_min"] == [1.0, None]
    assert run_labels(["r1", "r2"], {"model.depth": [4, 8], "model.width": [8, 8], "x.a": [1, 2], "x.b": [1, 2]},
                      most=2)[0] == "depth=4, width=8, …"


def test_final_numbers_and_the_table():
    records = [[{"kind": "step", "step": 10, "loss": 1.0}, {"kind": "eval", "step": 10, "test_acc": 0.5},
                {"kind": "step", "step": 20, "loss": 0.5, "lr": math.nan}],
               [{"kind": "step", "step": 10, "loss": 2.0, "digits_fd": 40.0, "custom": 1}]]
    assert final_numbers(records[0]) == {"step": 20.0, "loss": 0.5, "test_acc": 0.5}  # NaN is no number
    assert metric_fields(records) == ["loss", "test_acc", "digits_fd", "lr", "custom"]
    table = compare_table(["r1", "r2"], [A, B], records)
    assert list(table.columns) == ["run", "label", "model.alpha_min", "train.seed", "step", "loss", "test_acc",
                                   "digits_fd", "lr", "custom"]
    assert table.iloc[0].to_dict() == {"run": "r1", "label": table.iloc[0]["label"], "model.alpha_min": "1",
                                       "train.seed": "0", "step": "20", "loss": "0.5", "test_acc": "0.5",
                                       "digits_fd": "", "lr": "", "custom": ""}
    assert table.iloc[1]["digits_fd"] == "40"
