"""The replay views of saved frames: one per kind a run folder's frames are shown in, registered once each."""

import pytest

from lab.jobs.kinds import ALIGNMENT, KINDS, NODES, SIMILARITY
from lab.ui.views import replays


def test_a_replay_is_registered_only_for_a_kind_without_one():
    assert set(replays.REPLAYS) == {NODES, ALIGNMENT} and set(replays.REPLAYS) <= set(KINDS)
    with pytest.raises(ValueError, match="not a frame kind"):
        replays.register("no-such-kind", replays.NodesReplay)
    with pytest.raises(ValueError, match="not a frame kind"):
        replays.register(NODES, replays.NodesReplay)  # it has one
    assert SIMILARITY not in replays.REPLAYS  # nothing was added by the refused calls
