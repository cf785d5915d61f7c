"""The run lock: one process trains a run; a holder that is gone is taken over; two contenders never both win."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import lab
from lab.runfolder.lock import RunLock, RunLocked, read_holder, remove_stale

LAB = Path(lab.__file__).parent


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_live_holder_keeps_the_run_and_a_gone_one_is_taken_over(tmp_path):
    with RunLock(tmp_path) as lock:
        assert read_holder(tmp_path) == lock.record
        with pytest.raises(RunLocked, match="already being trained by this process"):
            RunLock(tmp_path).acquire()
    assert read_holder(tmp_path) is None  # released
    (tmp_path / "lock").write_text(json.dumps({"host": socket.gethostname(), "pid": _dead_pid(), "since": 0}))
    with RunLock(tmp_path):
        assert read_holder(tmp_path)["pid"] == os.getpid()
    assert not list(tmp_path.glob(".lock.stale-*"))


def test_only_a_lock_whose_process_is_gone_is_removed_for_it(tmp_path):
    """What records a killed child's run removes its lock; a live holder's, another host's or an unreadable lock
    stays."""
    assert not remove_stale(tmp_path)
    for record in ({"host": socket.gethostname(), "pid": os.getpid(), "since": 0},
                   {"host": "gpu-node-7", "pid": _dead_pid(), "since": 0}, "{torn"):
        (tmp_path / "lock").write_text(record if isinstance(record, str) else json.dumps(record))
        assert not remove_stale(tmp_path) and (tmp_path / "lock").exists()
    (tmp_path / "lock").write_text(json.dumps({"host": socket.gethostname(), "pid": _dead_pid(), "since": 0}))
    assert remove_stale(tmp_path) and not (tmp_path / "lock").exists()


def test_a_holder_on_another_host_or_an_unreadable_lock_is_named(tmp_path):
    (tmp_path / "lock").write_text(json.dumps({"host": "gpu-node-7", "pid": 1234, "since": 0}))
    with pytest.raises(RunLocked, match=r"process 1234 on host gpu-node-7 .* If that process is gone, remove"):
        RunLock(tmp_path).acquire()
    (tmp_path / "lock").write_text("{torn")
    with pytest.raises(RunLocked, match="cannot identify"):
        RunLock(tmp_path).acquire()


def test_two_processes_taking_over_one_stale_lock_never_both_win(tmp_path):
    (tmp_path / "lock").write_text(json.dumps({"host": socket.gethostname(), "pid": _dead_pid(), "since": 0}))
    release = tmp_path.parent / f"{tmp_path.name}-release"
    # each contender loads lab/runfolder/lock.py alone: the packages' __init__ files import torch, seconds of start-up
    # that only spread the contenders' attempts apart
    packages = {"lab": str(LAB), "lab.runs": str(LAB / "runs")}
    code = textwrap.dedent(f"""
        import sys
        import time
        import types
        from pathlib import Path
        for name, path in {packages!r}.items():
            sys.modules[name] = types.ModuleType(name)
            sys.modules[name].__path__ = [path]
        from lab.runfolder.lock import RunLock, RunLocked
        try:
            with RunLock(Path({str(tmp_path)!r})):
                print("won", flush=True)
                while not Path({str(release)!r}).exists():  # held until every contender has had its try
                    time.sleep(0.05)
        except RunLocked:
            print("refused", flush=True)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    try:
        deadline = time.monotonic() + 120
        while sum(p.poll() is not None for p in procs) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        release.touch()
    outcomes = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert all(p.returncode == 0 for p in procs), outcomes
    assert outcomes == ["refused", "refused", "won"]


def _tree(folder: Path) -> dict:
    """Every path below ``folder`` with its owner, mode and link target: what a run must leave as it found it."""
    return {p.relative_to(folder): (p.lstat().st_uid, p.lstat().st_mode, os.readlink(p) if p.is_symlink() else None)
            for p in sorted(folder.rglob("*"))}


def _planted(runtime: Path, elsewhere: Path, how: str) -> None:
    """Another user's preparation of a shared runtime folder, before this user's first ``lab train``."""
    ours = runtime / "residual-lab"
    if how == "runtime open to all":
        runtime.chmod(0o777)
        return
    ours.mkdir()
    if how == "locks open to all":
        (ours / "locks").mkdir(mode=0o777)
        (ours / "locks").chmod(0o777)
    elif how == "locks a link":
        (ours / "locks").symlink_to(elsewhere)
    elif how == "residual-lab another user's":
        (ours / "locks").mkdir(mode=0o700)
        os.chown(ours / "locks", 12345, 12345)
        os.chown(ours, 12345, 12345)


@pytest.mark.parametrize("how", ["locks open to all", "locks a link", "residual-lab another user's",
                                 "runtime open to all"])
def test_a_runtime_folder_others_prepared_is_not_used_and_training_goes_on(tmp_path, monkeypatch, capsys, how):
    """The attack: another user pre-creates ``$XDG_RUNTIME_DIR/residual-lab/locks`` (open to all, a link, their own)
    in a runtime folder they can write. Every ``lab train`` then failed with a traceback. The lab keeps its lock guards
    in the user's own cache folder instead, trains, and leaves the prepared folder as it was."""
    from lab.cli import main
    from lab.runfolder.lock import guard_folder

    if os.getuid() != 0 and how == "residual-lab another user's":
        pytest.skip("making a folder another user's needs root")
    runtime, elsewhere, home = tmp_path / "runtime", tmp_path / "elsewhere", tmp_path / "home"
    for folder in (runtime, elsewhere, home):
        folder.mkdir(mode=0o700)
    _planted(runtime, elsewhere, how)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("HOME", str(home))
    before = _tree(runtime)
    code = main(["train", "configs/spiral.yaml", "model.depth=2", "model.width=4", "data.n=128",
                 "train.batch_size=32", "train.max_steps=3", "--runs-dir", str(tmp_path / "runs"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0 and "completed" in err and "Traceback" not in err, err
    own = home / ".cache" / "residual-lab" / "locks"
    assert guard_folder() == own and own.stat().st_mode & 0o777 == 0o700
    assert _tree(runtime) == before and list(elsewhere.iterdir()) == []
