"""Replacing a file in a run folder: whole or not at all, never through a link."""

import os

import pytest

from lab.runfolder.entries import EntryError
from lab.runfolder.writes import atomic_path, remove_unfinished


def test_a_file_is_replaced_whole_or_not_at_all_and_never_through_a_linked_folder(tmp_path):
    target = tmp_path / "analysis" / "probe.json"
    with atomic_path(target) as f:
        f.write(b"old")
    with pytest.raises(RuntimeError), atomic_path(target) as f:  # a writer that fails half-way
        f.write(b"half")
        assert target.read_bytes() == b"old", "readers see the old file while the new one is written"
        raise RuntimeError("the sampler ran out of memory")
    assert target.read_bytes() == b"old" and os.listdir(target.parent) == ["probe.json"], "no temp file is left"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "figures").symlink_to(elsewhere)
    with pytest.raises(EntryError, match="is a link"), atomic_path(tmp_path / "figures" / "x.png") as f:
        f.write(b"x")
    assert os.listdir(elsewhere) == []


def test_a_writer_killed_mid_write_leaves_a_temp_file_the_next_start_removes(tmp_path):
    (tmp_path / ".last.pt.0123456789abcdef.tmp").write_bytes(b"partial")
    (tmp_path / "last.pt").write_bytes(b"good")
    assert remove_unfinished(tmp_path) == 1 and os.listdir(tmp_path) == ["last.pt"]
