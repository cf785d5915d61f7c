"""Figure 6 of *Residual Connections Harm Generative Representation Learning* from run folders.

The paper follows MAE pretraining runs of several ``model.alpha_min`` values and draws (a) the effective rank of the
bottleneck features over training, (b) linear-probe accuracy over training and (c) the Pearson r between the two
across the runs at each epoch. The loader engine (:mod:`lab.train.loader`) writes what that needs into every MAE
run's ``metrics.jsonl``: each ``eval`` record holds ``test_loss``, ``rank_effective`` (Roy & Vetterli's exp(H)) and
``rank_entropy`` (the entropy H itself, the paper's Eq. 6 number), and every ``train.probe_every`` epochs
``probe_top1`` (a quick linear probe). These functions only read the folders, so runs written by ``torchrun`` on a
cluster work as well as the lab's own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from lab.analysis.rank_sweep import pearson_r
from lab.config import ConfigError, ModelConfig, from_dict
from lab.runs.store import Run

__all__ = ["EVAL_COLUMNS", "alpha_min_of", "eval_table", "rank_probe_correlation"]

EVAL_COLUMNS = ("run", "alpha_min", "step", "epoch", "rank_effective", "rank_entropy", "probe_top1", "test_loss")
_VALUES = EVAL_COLUMNS[4:]  # the metrics read off each eval record; NaN where a record lacks one
MIN_RUNS = 3  # fewer runs give no meaningful (or, below 3, no defined) correlation


def alpha_min_of(config: dict[str, Any]) -> float:
    """``model.alpha_min`` of a saved run config as the model's builder sees it: the configured value, else the
    builder's default (1.0 for the lab's decayed-shortcut models); as written when the config does not name a known
    model; NaN for a model without the knob or a config without a model section (a run folder without config.json)."""
    model = config.get("model") if isinstance(config, dict) else None
    if not isinstance(model, dict):
        return math.nan
    try:
        value = from_dict(ModelConfig, model).get("alpha_min")
    except (ConfigError, TypeError, ValueError):  # a foreign or damaged config: take the value as written
        value = model.get("alpha_min")
    try:
        return float(value) if value is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


def eval_table(runs: Iterable[Run]) -> pd.DataFrame:
    """One row per evaluation record of each run, in the runs' order and then the file's order.

    Args:
        runs: run folders (e.g. ``RunStore(folder).runs()``); a run without metrics adds no rows.

    Returns:
        Columns :data:`EVAL_COLUMNS`: ``run`` (the folder's name), ``alpha_min`` (:func:`alpha_min_of` of its
        config), ``step`` and ``epoch`` (nullable integers), then the float metrics ``rank_effective``,
        ``rank_entropy``, ``probe_top1`` and ``test_loss``, NaN in records that lack them (``probe_top1`` is only in
        every ``train.probe_every``-th epoch's record; ranks only in MAE runs).
    """
    rows = []
    for run in runs:
        alpha_min = alpha_min_of(run.read_config())
        for record in run.metric_records():
            if record.get("kind") != "eval":
                continue
            rows.append({"run": run.id, "alpha_min": alpha_min, "step": record.get("step"),
                         "epoch": record.get("epoch"),
                         **{key: _number(record.get(key)) for key in _VALUES}})
    table = pd.DataFrame(rows, columns=list(EVAL_COLUMNS))
    return table.astype({"run": str, "alpha_min": float, "step": "Int64", "epoch": "Int64",
                         **dict.fromkeys(_VALUES, float)})


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def rank_probe_correlation(table: pd.DataFrame, rank: str = "rank_entropy") -> pd.DataFrame:
    """Pearson r between feature rank and probe accuracy across runs, at each epoch (Figure 6c).

    At every epoch, each run contributes its last record of that epoch that has both a finite ``rank`` and a
    finite ``probe_top1``; epochs where fewer than 3 runs do are left out. ``r`` is NaN where one of the two does
    not vary across the runs.

    Args:
        table: :func:`eval_table` rows.
        rank: the rank column: ``rank_entropy`` (the paper's Eq. 6 number, what its Figure 6 plots) or
            ``rank_effective`` (exp of it).

    Returns:
        Columns ``epoch``, ``r`` and ``n`` (the number of runs), one row per epoch, ascending.

    Raises:
        ValueError: ``rank`` is not a column of ``table``.
    """
    if rank not in table.columns or rank == "probe_top1":
        raise ValueError(f"rank must be a rank column of the table (rank_entropy or rank_effective); got {rank!r}")
    both = table[np.isfinite(table[rank].astype(float)) & np.isfinite(table["probe_top1"].astype(float))
                 & table["epoch"].notna()]
    last = both.sort_values("step", kind="stable").groupby(["epoch", "run"], sort=True).tail(1)
    rows = []
    for epoch, group in last.groupby("epoch", sort=True):
        if len(group) >= MIN_RUNS:
            rows.append({"epoch": int(epoch), "r": pearson_r(group[rank].to_numpy(float),
                                                            group["probe_top1"].to_numpy(float)),
                         "n": len(group)})
    return pd.DataFrame(rows, columns=["epoch", "r", "n"]).astype({"epoch": int, "r": float, "n": int})
