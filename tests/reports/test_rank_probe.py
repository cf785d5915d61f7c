"""Figure 6 tables from hand-made run folders: every eval record becomes a row, α_min comes from the saved config
(or the builder's default), and the rank-probe correlation is numpy's Pearson r at each epoch with at least three
runs."""

import math

import numpy as np
import pandas as pd
import pytest

from lab.reports.rank_probe import EVAL_COLUMNS, alpha_min_of, eval_table, rank_probe_correlation
from lab.runs.store import Run, RunStore

MAE = {"name": "mae_vit_tiny_patch4_32", "shortcut": "sublayer"}


def make_run(root, name: str, model: dict | None, records: list[dict]) -> Run:
    run = RunStore(root).create(name)
    if model is not None:
        run.write_config({"name": name, "model": model})
    if records:
        run.append_metrics(*records)
    return run


def evals(ranks, probes, *, loss0: float = 1.0) -> list[dict]:
    """Eval records at the end of epochs 1, 2, … (10 steps each), with a training-step record between them; a
    None rank or probe leaves the key out, as an epoch without a probe does."""
    out = []
    for k, (rank, probe) in enumerate(zip(ranks, probes, strict=True), start=1):
        out.append({"kind": "step", "step": 10 * k - 1, "loss": 2.0})
        record = {"kind": "eval", "step": 10 * k, "epoch": k, "test_loss": loss0 / k, "time": 0.0}
        if rank is not None:
            record |= {"rank_entropy": rank, "rank_effective": math.exp(rank)}
        if probe is not None:
            record["probe_top1"] = probe
        out.append(record)
    return out


@pytest.fixture
def sweep(tmp_path):
    """Four MAE runs (α_min 1.0 by default, 0.8, 0.6, 0.5) over three epochs; the 0.5 run has no probe at epoch 2,
    and only two runs reach epoch 3 with both numbers."""
    ranks = {1.0: [2.0, 2.5, 3.0], 0.8: [1.5, 2.2, 2.1], 0.6: [1.2, 1.4, None], 0.5: [0.9, 1.1, 1.6]}
    probes = {1.0: [0.30, 0.35, 0.40], 0.8: [0.33, 0.36, None], 0.6: [0.40, 0.41, 0.50], 0.5: [0.42, None, 0.55]}
    runs = []
    for alpha, name in ((1.0, "a1"), (0.8, "a08"), (0.6, "a06"), (0.5, "a05")):
        model = MAE if alpha == 1.0 else {**MAE, "alpha_min": alpha}  # α_min 1.0 left to the builder's default
        runs.append(make_run(tmp_path, name, model, evals(ranks[alpha], probes[alpha], loss0=alpha)))
    return runs, ranks, probes


def test_eval_table_has_one_row_per_eval_record_with_alpha_min_from_the_config(sweep):
    runs, ranks, probes = sweep
    table = eval_table(runs)
    assert list(table.columns) == list(EVAL_COLUMNS) and len(table) == 12  # step records are not rows
    assert table["run"].tolist() == [r.id for r in runs for _ in range(3)]
    assert table["alpha_min"].tolist() == [a for a in (1.0, 0.8, 0.6, 0.5) for _ in range(3)]
    assert table["step"].tolist() == [10, 20, 30] * 4 and table["epoch"].tolist() == [1, 2, 3] * 4
    for alpha, group in table.groupby("alpha_min"):
        expect_rank = np.array([np.nan if v is None else v for v in ranks[alpha]])
        np.testing.assert_allclose(group["rank_entropy"], expect_rank)
        np.testing.assert_allclose(group["rank_effective"], np.exp(expect_rank))
        np.testing.assert_allclose(group["probe_top1"], [np.nan if v is None else v for v in probes[alpha]])
        np.testing.assert_allclose(group["test_loss"], [alpha / k for k in (1, 2, 3)])


def test_correlation_is_numpys_pearson_r_at_each_epoch_with_three_runs(sweep):
    runs, ranks, probes = sweep
    table = eval_table(runs)
    corr = rank_probe_correlation(table)
    assert list(corr.columns) == ["epoch", "r", "n"]
    assert corr["epoch"].tolist() == [1, 2] and corr["n"].tolist() == [4, 3]  # epoch 3: only two runs have both
    r1 = np.corrcoef([ranks[a][0] for a in ranks], [probes[a][0] for a in ranks])[0, 1]
    both2 = [a for a in ranks if ranks[a][1] is not None and probes[a][1] is not None]
    r2 = np.corrcoef([ranks[a][1] for a in both2], [probes[a][1] for a in both2])[0, 1]
    np.testing.assert_allclose(corr["r"], [r1, r2], rtol=1e-12)
    assert r1 < 0  # these made-up runs have the paper's sign
    effective = rank_probe_correlation(table, rank="rank_effective")
    r1e = np.corrcoef([math.exp(ranks[a][0]) for a in ranks], [probes[a][0] for a in ranks])[0, 1]
    assert effective["r"].iloc[0] == pytest.approx(r1e, rel=1e-12)
    with pytest.raises(ValueError, match="rank"):
        rank_probe_correlation(table, rank="probe_top1")
    with pytest.raises(ValueError, match="rank"):
        rank_probe_correlation(table, rank="rank")


def test_a_run_counts_once_per_epoch_with_its_last_record(tmp_path):
    """eval_every inside an epoch gives several records of one epoch; the last one with both numbers counts."""
    runs = [make_run(tmp_path, f"r{k}", {**MAE, "alpha_min": a}, [
        {"kind": "eval", "step": 5, "epoch": 0, "rank_entropy": 9.0, "probe_top1": 0.9},
        {"kind": "eval", "step": 10, "epoch": 1, "rank_entropy": rank, "probe_top1": probe}])
        for k, (a, rank, probe) in enumerate([(1.0, 1.0, 0.2), (0.8, 2.0, 0.1), (0.6, 3.0, 0.3)])]
    runs[0].append_metrics({"kind": "eval", "step": 12, "epoch": 1, "rank_entropy": 4.0, "probe_top1": 0.5})
    corr = rank_probe_correlation(eval_table(runs))
    assert corr["epoch"].tolist() == [0, 1] and corr["n"].tolist() == [3, 3]
    assert math.isnan(corr["r"].iloc[0])  # every run the same at epoch 0: no variance, no r
    assert corr["r"].iloc[1] == pytest.approx(np.corrcoef([4.0, 2.0, 3.0], [0.5, 0.1, 0.3])[0, 1], rel=1e-12)


def test_runs_without_probes_ranks_metrics_or_config(tmp_path):
    supervised = make_run(tmp_path, "classify", {"name": "residual_mlp", "depth": 4},
                          [{"kind": "eval", "step": 3, "epoch": 1, "test_loss": 0.5, "test_acc": 0.9}])
    no_probe = make_run(tmp_path, "noprobe", {**MAE, "alpha_min": 0.7}, evals([1.0, 1.1], [None, None]))
    empty = make_run(tmp_path, "empty", MAE, [])
    foreign = make_run(tmp_path, "foreign", {"name": "not_a_model", "alpha_min": 0.9}, evals([1.0], [0.5]))
    bare = make_run(tmp_path, "bare", None, evals([2.0], [0.3]))
    timm = make_run(tmp_path, "timm", {"name": "timm_resnet50d"}, [])
    table = eval_table([supervised, no_probe, empty, foreign, bare, timm])
    assert table["run"].tolist() == [supervised.id, no_probe.id, no_probe.id, foreign.id, bare.id]
    assert table["alpha_min"].tolist()[:4] == [1.0, 0.7, 0.7, 0.9]  # residual_mlp's default, saved, as written
    assert math.isnan(table["alpha_min"].iloc[4])  # no config.json
    first = table.iloc[0]
    assert first["test_loss"] == 0.5 and all(math.isnan(first[k]) for k in ("rank_entropy", "probe_top1"))
    assert table["probe_top1"].isna().tolist() == [True, True, True, False, False]
    assert rank_probe_correlation(table).empty  # at most two runs have both numbers at any epoch
    assert all(math.isnan(alpha_min_of(c)) for c in ({"model": {"name": "timm_resnet50d"}}, {}, {"model": 3}))
    assert math.isnan(alpha_min_of({"model": {"name": "mae_vit_tiny_patch4_32", "alpha_min": "x"}}))  # no error


def test_empty_input_gives_empty_tables_with_the_columns():
    table = eval_table([])
    assert list(table.columns) == list(EVAL_COLUMNS) and table.empty
    corr = rank_probe_correlation(table)
    assert list(corr.columns) == ["epoch", "r", "n"] and corr.empty
    assert isinstance(corr, pd.DataFrame)
