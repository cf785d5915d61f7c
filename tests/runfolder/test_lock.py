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
