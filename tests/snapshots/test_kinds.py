"""The kinds of snapshot: one record each; every kind's snapshots, as its builder or job makes them, hold the arrays its
views draw (its contract), and a snapshot that breaks the contract is refused before it is drawn."""

import numpy as np
import pytest

from lab.config import ExperimentConfig, apply_overrides
from lab.reports.sweep_snapshot import rank_snapshot
from lab.snapshots.builders import alignment_builder
from lab.snapshots.kinds import (
    ALIGNMENT,
    KINDS,
    NODES,
    RANK,
    SIMILARITY,
    Kind,
    SnapshotError,
    check_snapshot,
    default_builders,
    default_cadence,
    register,
)
from lab.train.build import build_data, build_model


def _model(**overrides):
    cfg = apply_overrides(ExperimentConfig(), {"model.depth": 3, "model.width": 6, "data.n": 256, **overrides})
    data = build_data(cfg)
    return build_model(cfg, data).eval(), data


def test_the_publishers_defaults_are_the_kinds_with_a_builder_and_a_cadence():
    assert default_builders() == {NODES: KINDS[NODES].builder, SIMILARITY: KINDS[SIMILARITY].builder}
    assert default_cadence() == {NODES: (10, 0.0), SIMILARITY: (0, 2.0)}
    assert KINDS[ALIGNMENT].builder is None and KINDS[RANK].builder is None  # their jobs build them


@pytest.mark.parametrize("kind", [NODES, SIMILARITY])
def test_a_default_builders_snapshot_keeps_its_contract(kind):
    model, _ = _model()
    snapshot = KINDS[kind].builder(model)
    check_snapshot(kind, snapshot)
    assert set(KINDS[kind].arrays) <= set(snapshot)


def test_alignment_and_rank_snapshots_keep_their_contracts():
    model, data = _model(**{"model.name": "fc_resnet", "data.name": "digits", "model.depth": 2, "model.width": 16})
    check_snapshot(ALIGNMENT, alignment_builder(data, k=4, inputs=16, nc_inputs=50, baseline_trials=2)(model))
    mlps = [_model(**{"model.alpha_min": a, "model.shortcut": "linear"}) for a in (1.0, 0.5)]
    snapshot = rank_snapshot([m for m, _ in mlps], mlps[0][1], names=["a", "b"], points=64)
    check_snapshot(RANK, snapshot)


def test_a_snapshot_that_breaks_its_contract_is_named():
    model, _ = _model()
    snapshot = KINDS[NODES].builder(model)
    with pytest.raises(SnapshotError, match="no array 'decision'"):
        check_snapshot(NODES, {k: v for k, v in snapshot.items() if k != "decision"})
    with pytest.raises(SnapshotError, match="'maps' is float32 of shape"):
        check_snapshot(NODES, {**snapshot, "maps": snapshot["maps"][0]})
    with pytest.raises(SnapshotError, match="numeric array"):
        check_snapshot(NODES, {**snapshot, "weights": np.array(["a"])})


def test_a_kind_is_registered_once():
    with pytest.raises(ValueError, match="registered already"):
        register(Kind(NODES, "again"))
    assert KINDS[NODES].title != "again"
