"""The views of saved snapshots: one per kind a run folder's snapshots are shown in, registered once each."""

import pytest

from lab.jobs.kinds import ALIGNMENT, KINDS, NODES, SIMILARITY, Kind
from lab.ui.views import replays
from lab.ui.views.kind_views.nodes import NodesReplay


def test_a_view_is_registered_only_for_a_kind_without_one():
    assert set(replays.REPLAYS) == {NODES, ALIGNMENT} and set(replays.REPLAYS) <= set(KINDS)
    with pytest.raises(ValueError, match="not a snapshot kind"):
        replays.register("no-such-kind", NodesReplay)
    with pytest.raises(ValueError, match="not a snapshot kind"):
        replays.register(NODES, NodesReplay)  # it has one
    with pytest.raises(ValueError, match="not a snapshot kind"):
        replays.register(Kind(NODES, "again", {"maps": 4}), NodesReplay)  # a record of a name taken
    assert SIMILARITY not in replays.REPLAYS and KINDS[NODES].title != "again"  # the refused calls added nothing
    assert replays.live_kinds("Playground") == []  # the lab's own kinds are laid out by their pages
