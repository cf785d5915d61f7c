"""The kinds of snapshot: one record per kind of snapshot a job publishes and a view draws.

A *snapshot* (:class:`~lab.snapshots.snapshot.Snapshot`) is one kind's arrays at one training step. A :class:`Kind` says
everything the lab knows about a kind below the pages: its name, how a chooser names it, the numeric arrays its
views draw (the snapshot's contract, checked before a snapshot read from a run folder is drawn), the builder that
makes it from any model and its default cadence, when it has them. The views that draw a kind live with the pages:
:func:`lab.ui.views.replays.register` registers a kind's view, and with it a kind new to the lab.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lab import plugins
from lab.snapshots.builders import Builder, nodes_snapshot, similarity_snapshot

NODES, SIMILARITY, ALIGNMENT, RANK = "nodes", "similarity", "alignment", "rank"


@dataclass(frozen=True)
class Kind:
    """One kind of snapshot.

    Attributes:
        name: the kind's name (a snapshot file's prefix: ``snapshots/<name>-<step>.npz``).
        title: how a chooser names it.
        arrays: the numeric arrays its views draw and each one's number of axes (the snapshot's contract).
        builder: makes a snapshot from any model, for the publisher's defaults; None for a kind its job builds
            itself (alignment snapshots need the data; rank snapshots a whole sweep).
        cadence: the default ``(every_n_steps, every_t_seconds)`` of a builder the publisher runs by default.
    """

    name: str
    title: str
    arrays: Mapping[str, int] = field(default_factory=dict)
    builder: Builder | None = None
    cadence: tuple[int, float] | None = None


KINDS: dict[str, Kind] = {}
"""Every kind, by name."""


def register(kind: Kind) -> Kind:
    """Add ``kind`` to :data:`KINDS`.

    Raises:
        ValueError: a kind of that name exists already.
    """
    if kind.name in KINDS:
        raise ValueError(f"a snapshot kind {kind.name!r} is registered already")
    KINDS[kind.name] = kind
    return kind


register(Kind(NODES, "Node maps and decision boundary (the Playground's views)",
              {"maps": 4, "weights": 3, "decision": 2}, nodes_snapshot, (10, 0.0)))
register(Kind(SIMILARITY, "Layer distance and linear CKA (the Playground's similarity view)",
              {"distance": 2, "cka": 2}, similarity_snapshot, (0, 2.0)))
register(Kind(ALIGNMENT, "Residual Alignment (the Alignment page's views)",
              {"sigma": 2, "scores": 2, "grid": 5, "baseline": 1, "inv_sigma": 1, "inv_sigma_fit": 1,
               "traj_pca": 3, "traj_gauss": 3, "labels": 1, "nc1": 1}))
register(Kind(RANK, "Rank and probe of every layer of a sweep's members (the Rank page's views)",
              {"effective_rank": 2, "eq6_entropy": 2, "probe_acc": 2, "pca": 3, "labels": 1}))


def default_builders() -> dict[str, Builder]:
    """The builders a publisher runs when a job names none, by kind."""
    return {k.name: k.builder for k in KINDS.values() if k.builder is not None and k.cadence is not None}


def default_cadence() -> dict[str, tuple[int, float]]:
    """Their default cadences, by kind."""
    return {k.name: k.cadence for k in KINDS.values() if k.builder is not None and k.cadence is not None}


class SnapshotError(ValueError):
    """A snapshot that its views cannot draw; the message says what is missing or malformed."""


def check_snapshot(kind: str, snapshot: Mapping[str, np.ndarray], model: Mapping[str, Any] | None = None) -> None:
    """Raise :class:`SnapshotError` unless ``snapshot`` holds every array of ``kind``'s contract (:attr:`Kind.arrays`),
    numeric, with its number of axes and no empty axis; and, given the ``model`` section of the run's config, unless
    it has the layers and nodes that model has (a ``nodes`` snapshot of a residual MLP): a snapshot read from a run
    folder is checked against the run's own config before any view works on it."""
    for name, ndim in KINDS[kind].arrays.items():
        if name not in snapshot:
            raise SnapshotError(f"the snapshot has no array {name!r}")
        array = np.asarray(snapshot[name])
        if array.dtype.kind not in "biuf" or array.ndim != ndim or 0 in array.shape:
            raise SnapshotError(f"the snapshot's {name!r} is {array.dtype} of shape {array.shape}; its view draws a "
                             f"numeric array of {ndim} non-empty axes")
    if kind == NODES and model is not None:
        _check_nodes(snapshot, model)


def _check_nodes(snapshot: Mapping[str, np.ndarray], model: Mapping[str, Any]) -> None:
    """A ``nodes`` snapshot of the residual MLP ``model`` (a config's model section) has its depth + 1 layers of its
    width's nodes, in its maps and its weights."""
    if not isinstance(model, Mapping) or model.get("name", "residual_mlp") != "residual_mlp":
        return  # a model section that is no mapping (a hostile config) says nothing about sizes
    depth, width = model.get("depth") or 32, model.get("width") or 32  # the builder's defaults
    if not (isinstance(depth, int) and isinstance(width, int)):
        return
    layers = depth + int(model.get("decoder_depth") or 0) + 1
    for name in ("maps", "weights"):
        shape = np.shape(snapshot[name])[:2]
        if shape != (layers, width):
            raise SnapshotError(f"the snapshot's {name!r} holds {shape[0]} layers of {shape[1]} nodes; the run's model "
                                f"has {layers} layers (h_0 … h_{layers - 1}) of {width}")


plugins.load(plugins.KINDS)  # other packages' kinds, known to every process that trains or draws them
