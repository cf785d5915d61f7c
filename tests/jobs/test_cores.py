"""The machine-wide ledger of cores that training children keep to themselves, exercised by real processes."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from lab.jobs import cores

CHILD = textwrap.dedent("""
    import importlib.util, json, os, sys, threading, time
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("cores", sys.argv[4])  # alone: no torch to import
    cores = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cores)
    placement = cores.Placement(int(sys.argv[1]), 7, Path(sys.argv[2]), wait=float(sys.argv[3]))
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()  # a thread older than any check

    def say():
        tids = [int(t) for t in os.listdir("/proc/self/task")]
        threads = {(tuple(sorted(os.sched_getaffinity(t))), os.getpriority(os.PRIO_PROCESS, t)) for t in tids}
        print(json.dumps({"cpus": sorted(placement.cpus), "threads": sorted(threads)}), flush=True)

    say()
    for line in sys.stdin:
        getattr(placement, line.strip())()
        say()
""")

needs_a_spare_core = pytest.mark.skipif(not cores.candidates(), reason="this machine has no core to spare")


class Child:
    """A process placed as a training child is (``threads`` cores wanted), driven through its stdin."""

    def __init__(self, locks, threads: int = 1, wait: float = 0.0) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(threads), str(locks), str(wait),
                                      cores.__file__],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.state = json.loads(self.proc.stdout.readline())

    def do(self, method: str) -> dict:
        self.proc.stdin.write(method + "\n")
        self.proc.stdin.flush()
        self.state = json.loads(self.proc.stdout.readline())
        return self.state

    def own_core(self) -> bool:
        """On the highest core, at the server's priority, every thread."""
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        return self.state == {"cpus": [top()], "threads": [[[top()], mine]]}

    def niced_everywhere(self) -> bool:
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        return self.state == {"cpus": [], "threads": [[sorted(os.sched_getaffinity(0)), min(mine + 7, 19)]]}

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def top() -> int:
    return cores.candidates()[0]


@pytest.fixture
def children(tmp_path):
    made = []

    def make(**kwargs) -> Child:
        made.append(Child(tmp_path / "cores", **kwargs))
        return made[-1]

    yield make
    for child in made:
        child.kill()


def test_the_spare_cores_are_the_lowest_and_the_highest_is_taken_first(monkeypatch):
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert cores.candidates() == [3, 2, 1]
    assert cores.candidates(spare=2) == [3, 2]


@needs_a_spare_core
def test_a_child_keeps_its_core_until_another_waits_and_then_yields_for_good(children):
    first = children()
    assert first.own_core()
    assert first.do("check") == first.state and first.own_core(), "nobody waits: it keeps its core"
    second = children(wait=0.2)
    assert second.niced_everywhere(), "no core free"
    first.do("check")
    assert first.niced_everywhere(), "every thread of it, the older one included"
    third = children()
    assert third.niced_everywhere(), "a core is free, but a child waits: nobody keeps one"
    second.kill()
    third.kill()
    assert children().own_core(), "nobody waits any more"


@needs_a_spare_core
def test_a_gpu_child_takes_and_waits_for_no_core_and_a_child_too_big_for_the_machine_makes_all_yield(children):
    gpu = children(threads=0)
    assert gpu.niced_everywhere()
    first = children()
    assert first.own_core(), "the GPU run waits for none"
    big = children(threads=len(cores.candidates()) + 1)
    assert big.niced_everywhere()
    first.do("check")
    assert first.niced_everywhere(), "the machine is oversubscribed: the server comes first"


@needs_a_spare_core
def test_the_cores_a_child_releases_or_dies_with_go_to_the_next(children):
    first = children()
    first.do("release")  # asked to stop: it still ends its step, on its core
    assert first.state["cpus"] == [] and first.state["threads"] == [[[top()], os.getpriority(os.PRIO_PROCESS, 0)]]
    second = children(wait=2.0)
    assert second.own_core()
    second.kill()  # however it ends, the kernel drops its locks
    assert children().own_core()
