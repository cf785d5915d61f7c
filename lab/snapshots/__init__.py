"""Snapshots: what a training publishes for its views, one home for the whole concept.

A *snapshot* (:class:`~lab.snapshots.snapshot.Snapshot`) is one kind's arrays at one training step. Here are the
type and how a run folder's saved ones are read back (:mod:`~lab.snapshots.snapshot`), the kinds and their contracts
(:mod:`~lab.snapshots.kinds`, where every kind registers, the lab's own included), the builders that make them from
any model (:mod:`~lab.snapshots.builders`), the cadence that says when (:mod:`~lab.snapshots.cadence`), the publisher
that runs the builders as a training callback (:mod:`~lab.snapshots.publish`) and the shadow copy they build from on
a thread of their own (:mod:`~lab.snapshots.shadow`). Nothing here imports Panel: the views that draw a kind
register against its name in :mod:`lab.ui.views.replays`.
"""
