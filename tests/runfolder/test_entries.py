"""A run folder is hostile input: each test is an attack (or an unlucky file) and what the lab does with it — no
freeze on a named pipe, no memory blow-up from a snapshot or a huge file, no number that breaks a reader, no file
written through a planted link, and every refusal naming the entry and why."""

import io
import json
import os
import pickle
import subprocess
import sys
import threading
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from lab.runfolder import entries
from lab.runfolder.entries import (
    METRICS_CHUNK,
    EntryError,
    checkpoint_field,
    loads_yaml,
    read_bytes,
    read_json,
    read_jsonl,
    read_npz,
    read_picture,
)
from lab.runfolder.lock import RunLock, RunLocked, guard_folder
from lab.runs.catalog import RunCatalog, RunReader, run_summary
from lab.runs.store import Run, RunStore
from lab.train.checkpoint import save_checkpoint
from lab.ui.views.run_views import RunCurves

REPO = Path(__file__).resolve().parents[2]


def _run(root: Path, name: str = "r") -> Run:
    run = RunStore(root).create(name)
    run.write_config({"name": name, "model": {"name": "residual_mlp"}})
    run.write_status("running", "training", step=3, total_steps=10)
    run.append_metrics({"kind": "step", "step": 1, "loss": 0.5})
    return run


def _within(seconds: float, fn, *args):
    """``fn(*args)`` run in a thread, which must return (or raise) within ``seconds``: a read that blocks fails the
    test instead of hanging it."""
    out: dict = {}

    def call() -> None:
        try:
            out["value"] = fn(*args)
        except BaseException as err:  # raised again below, on the test's thread
            out["error"] = err

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn.__name__} still blocked after {seconds} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.mark.parametrize("entry", ["status.json", "config.json", "config.yaml", "metrics.jsonl"])
def test_a_named_pipe_in_place_of_an_entry_is_named_and_never_waited_on(tmp_path, entry):
    run = _run(tmp_path)
    (run.path / entry).unlink(missing_ok=True)
    if entry == "config.yaml":  # read where there is no config.json (a child process that has not started yet)
        (run.path / "config.json").unlink()
    os.mkfifo(run.path / entry)  # nobody ever writes to it: an open without O_NONBLOCK would block for ever
    summary = _within(10, run_summary, run.path)
    assert any(f"{entry} is unreadable" in p and "a named pipe, not a regular file" in p for p in summary["problems"])
    with pytest.raises(EntryError, match="named pipe"):
        _within(10, read_bytes, run.path / entry, 1024)
    assert _within(10, run.read_metrics) == ([], 0) or entry != "metrics.jsonl"
    if entry == "status.json":
        assert _within(10, run.read_status)["state"] == "unknown"


def test_lab_resume_of_a_run_whose_lock_is_a_named_pipe_is_refused_at_once(tmp_path):
    runs = tmp_path / "runs"
    subprocess.run([sys.executable, "-m", "lab", "train", "configs/spiral.yaml", "model.depth=2", "model.width=4",
                    "data.n=128", "train.epochs=1", "--runs-dir", str(runs), "--no-progress"], cwd=REPO, check=True,
                   capture_output=True, timeout=300)
    (run,) = runs.iterdir()
    os.mkfifo(run / "lock")
    done = subprocess.run([sys.executable, "-m", "lab", "resume", str(run), "train.epochs=2", "--no-progress"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "locked by a process this one cannot identify" in done.stderr and "named pipe" in done.stderr, done.stderr


def test_a_planted_link_named_like_the_locks_temp_file_writes_nothing_through_it(tmp_path):
    run = _run(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    for pid in (os.getpid(), *range(os.getpid() + 1, os.getpid() + 50)):  # whichever pid takes the lock
        (run.path / f".lock.{pid}.tmp").symlink_to(victim)
    with RunLock(run.path):
        lock = run.path / "lock"
        assert lock.is_file() and not lock.is_symlink() and json.loads(lock.read_text())["pid"] == os.getpid()
    assert victim.read_text() == "precious" and not os.path.lexists(run.path / "lock")


def test_the_lock_guard_is_private_timed_and_removed(tmp_path, monkeypatch):
    import fcntl
    import hashlib

    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    # the attack: another user makes the shared temp folder's guard folder first (it used to be used, or refused)
    planted = tmp_path / "tmp" / f"residual-lab-{os.getuid()}"
    planted.mkdir(mode=0o777)
    if os.getuid() == 0:
        os.chown(planted, 4242, -1)
    run = _run(tmp_path / "runs")
    folder = guard_folder()
    assert folder == tmp_path / "home" / ".cache" / "residual-lab" / "locks"  # the user's own, never the shared one
    assert folder.stat().st_mode & 0o777 == 0o700 and list(planted.iterdir()) == []
    with RunLock(run.path):
        pass
    assert list(folder.iterdir()) == [], "no guard file is left behind"
    # another process of this user holds the guard: the wait is bounded and names it
    key = hashlib.sha256(str(run.path.resolve()).encode()).hexdigest()[:24]
    fd = os.open(folder / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    os.write(fd, b"4242")
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(RunLocked, match=r"process 4242 of this user, which has held the guard .* for more than"):
            RunLock(run.path).acquire(wait_s=0.3)  # raised at all: the wait is bounded
    finally:
        os.close(fd)
    # a folder someone else could write is refused
    folder.chmod(0o777)
    with pytest.raises(PermissionError, match="not a private folder"):
        guard_folder()


def test_integers_beyond_float_range_are_no_numbers_and_break_no_reader(tmp_path):
    from lab.reports.compare import compare_table

    run = _run(tmp_path)
    huge = "9" * 400
    (run.path / "status.json").write_text(f'{{"state": "running", "step": {huge}, "metrics": {{"acc": {huge}}}}}')
    with open(run.path / "metrics.jsonl", "a") as f:
        f.write(f'{{"kind": "step", "step": 2, "loss": {huge}}}\n{{"kind": "step", "step": {huge}, "loss": 1}}\n')
        f.write('{"kind": "step", "step": 4, "loss": 0.25}\n')
    summary = run_summary(run.path)
    assert summary["step"] == 4 and summary["metrics"] == {"loss": 0.25}  # the last finite values
    records = run.read_metrics()[0]
    assert [r["step"] for r in records][-1] == 4, "the records after the huge ones are not lost"
    curves = RunCurves()
    curves.extend(records)
    assert curves.live.sources[("step", "loss")].data["step"] == [1, 4]
    table = compare_table(["a", "b"], [{"x": 1}, {"x": int(huge[:300])}], [records, records])
    assert list(table["loss"]) == ["0.25", "0.25"]
    with pytest.raises(ValueError, match="nested too deeply"):
        entries.loads_json("[" * 100_000)


def test_metrics_are_read_a_chunk_at_a_time_and_the_cursor_moves_only_past_what_was_read(tmp_path):
    run = _run(tmp_path)
    line = json.dumps({"kind": "step", "step": 1, "loss": 0.5, "pad": "x" * 200}) + "\n"
    with open(run.path / "metrics.jsonl", "w") as f:
        f.write(line * (3 * METRICS_CHUNK // len(line)))
    size = (run.path / "metrics.jsonl").stat().st_size
    first = read_jsonl(run.path / "metrics.jsonl")
    assert first.more and first.cursor <= METRICS_CHUNK and first.cursor % len(line) == 0
    assert len(first.records) == first.cursor // len(line)
    reader = RunReader(run.path)
    reads = 0
    while True:
        reads += 1
        reader.update_metrics()
        if not reader.unread:
            break
    assert reads >= 3 and reader.records == size // len(line) and reader.bad_lines == 0
    with open(run.path / "metrics.jsonl", "a") as f:  # a line longer than a chunk is stepped over, counted
        f.write("x" * (METRICS_CHUNK + 10) + "\n" + line)
    while True:
        reader.update_metrics()
        if not reader.unread:
            break
    assert reader.bad_lines == 2 and reader.records == size // len(line) + 1


def test_entries_over_their_cap_are_refused_by_name(tmp_path):
    run = _run(tmp_path)
    with open(run.path / "status.json", "wb") as f:
        f.truncate(2 * entries.MiB)  # sparse: no disk, but its size is what counts
    assert "status.json holds 2.1 MB, more than the 1.0 MB" in " ".join(run_summary(run.path)["problems"])
    figure = run.path / "figures" / "reconstruction-000000010.png"
    figure.parent.mkdir()
    with open(figure, "wb") as f:
        f.truncate(150 * 10**6)
    with pytest.raises(EntryError, match="holds 150.0 MB, more than the 16.8 MB"):
        read_picture(figure)
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("L", (8, 8)).save(buffer, "PNG")
    data = bytearray(buffer.getvalue())
    data[16:24] = (50_000).to_bytes(4, "big") * 2  # the header declares 50,000 × 50,000 pixels (CRC made good)
    data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")
    figure.write_bytes(bytes(data))
    with pytest.raises(EntryError, match="pixels"):
        read_picture(figure)


def _deflated_bomb(path: Path, shape=(128, 1024, 32, 32)) -> None:
    """A snapshot whose one member, deflated, declares a float32 array of ``shape`` (512 MB of zeros in 0.5 MB)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf, \
            zf.open("maps.npy", "w", force_zip64=True) as f:
        np.lib.format.write_array_header_2_0(f, {"descr": "<f4", "fortran_order": False, "shape": shape})
        chunk = bytes(1 << 20)
        for _ in range(int(np.prod(shape)) * 4 // len(chunk)):
            f.write(chunk)


def test_a_deflated_snapshot_bomb_is_refused_before_it_is_loaded(tmp_path):
    run = _run(tmp_path)
    bomb = run.path / "snapshots" / "nodes-000000005.npz"
    _deflated_bomb(bomb)
    assert bomb.stat().st_size < 2 * entries.MiB
    tracemalloc.start()
    with pytest.raises(EntryError, match="expands .*-fold"):
        run.load_snapshot("nodes", 5)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 20 * entries.MiB, f"peak {peak / 1e6:.0f} MB"
    assert run.load_snapshot("nodes") is None, "the latest readable snapshot: none"


def test_snapshot_members_are_checked_against_their_headers(tmp_path):
    good = tmp_path / "good.npz"
    np.savez(good, maps=np.arange(6, dtype=np.float32).reshape(2, 3), names=np.array(["a", "b"]),
             fortran=np.asfortranarray(np.arange(6).reshape(2, 3)))
    got = read_npz(good)
    assert got["maps"].tolist() == [[0, 1, 2], [3, 4, 5]] and got["names"].tolist() == ["a", "b"]
    assert got["fortran"].tolist() == [[0, 1, 2], [3, 4, 5]]
    # a header that lies about its size
    lying = io.BytesIO()
    with zipfile.ZipFile(lying, "w") as zf, zf.open("maps.npy", "w") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False, "shape": (10**6, 1000)})
        f.write(bytes(64))
    (tmp_path / "lying.npz").write_bytes(lying.getvalue())
    with pytest.raises(EntryError, match=r"declares shape \(1000000, 1000\) of float64 \(8.0 GB\) but holds 64 B"):
        read_npz(tmp_path / "lying.npz")
    # objects are never unpickled
    np.savez(tmp_path / "objects.npz", x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(EntryError, match="numbers and strings only"):
        read_npz(tmp_path / "objects.npz")
    # an encrypted member
    data = bytearray(good.read_bytes())
    central = data.find(b"PK\x01\x02")
    data[central + 8] |= 1  # the general-purpose flag's "encrypted" bit
    (tmp_path / "encrypted.npz").write_bytes(bytes(data))
    with pytest.raises(EntryError, match="is encrypted"):
        read_npz(tmp_path / "encrypted.npz")
    (tmp_path / "garbage.npz").write_bytes(b"not a zip")
    with pytest.raises(EntryError, match="is not a snapshot file"):
        read_npz(tmp_path / "garbage.npz")


def test_a_yaml_config_that_expands_through_aliases_is_refused(tmp_path):
    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(9))
    with pytest.raises(Exception, match="alias"):
        loads_yaml(laughs)
    run = _run(tmp_path)
    (run.path / "config.json").unlink()
    (run.path / "config.yaml").write_text(laughs)
    assert any("config.yaml is unreadable" in p and "alias" in p for p in run_summary(run.path)["problems"])
    assert read_json(run.path / "status.json", 1024)["state"] == "running"


def test_an_unchanged_folder_is_not_read_again(tmp_path, monkeypatch):
    store = RunStore(tmp_path)
    for i in range(20):
        save_checkpoint(_run(tmp_path, f"r{i}"), {"step": 3, "model": {}})
    catalog = RunCatalog()
    assert len(catalog.summaries([store.root])) == 20
    opened = []
    real = entries.open_entry
    monkeypatch.setattr(entries, "open_entry", lambda path: opened.append(path) or real(path))
    assert len(catalog.summaries([store.root])) == 20
    assert opened == [], "a refresh of unchanged folders opens no file"


def _plant(marker: str) -> None:
    """What a hostile checkpoint would run when loaded: here, it leaves a file."""
    Path(marker).write_text("ran")


class _Hostile:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return _plant, (str(self.marker),)


def test_a_checkpoints_plain_entries_are_read_without_torch_building_nothing_else(tmp_path, monkeypatch):
    import torch

    model = torch.nn.Linear(2, 3)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 2)).sum().backward()
    optimizer.step()
    run = _run(tmp_path)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 7, "best_acc": 0.5,
             "mask_generator": torch.Generator().get_state(), "droppath_masks": [torch.empty(0)],
             "dtype": torch.float16, "device": torch.device("cpu"), "shape": torch.Size([2]), "tag": b"x"}
    path = save_checkpoint(run, state)
    assert checkpoint_field(path, "step") == 7 and checkpoint_field(path, "best_acc") == 0.5
    assert checkpoint_field(path, "model") is None, "a state dict is not a plain value"
    assert checkpoint_field(path, "shape") is None and checkpoint_field(path, "missing") is None

    marker = tmp_path / "ran"
    hostile = run.checkpoint_path("hostile")
    torch.save({"step": 3, "x": _Hostile(marker)}, hostile)
    assert checkpoint_field(hostile, "step") is None and not marker.exists(), "refused, as weights_only refuses it"
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        torch.load(hostile, weights_only=True)

    torn = run.checkpoint_path("torn")
    torn.write_bytes(path.read_bytes()[:200])
    linked = run.checkpoint_path("linked")
    linked.symlink_to(path)
    assert [checkpoint_field(p, "step") for p in (torn, linked, tmp_path / "missing.pt")] == [None] * 3
    elsewhere = tmp_path / "elsewhere"
    elsewhere.symlink_to(path.parent)
    assert checkpoint_field(elsewhere / path.name, "step") is None, "never read through a linked folder"
    monkeypatch.setitem(entries.LIMITS, "checkpoint pickle", 64)
    assert checkpoint_field(path, "step") is None, "a structure over its cap is not read"
