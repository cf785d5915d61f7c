"""The job follower every page uses: start, poll, hand each record and snapshot to the page once, stop."""

import asyncio
import gc
import time

from lab.ui.follower import JobFollower
from tests.jobs.helpers import tiny
from tests.ui.driving import shown
from tests.waiting import deadline, wait_until


def test_follower_hands_every_record_and_each_new_snapshot_once(manager):
    follower = JobFollower(manager)
    records, snapshots = [], []
    follower.on_metrics(records.extend)
    follower.on_snapshot("nodes", lambda snapshot: snapshots.append(int(snapshot["step"])))
    job = follower.start(tiny(**{"train.max_steps": 60}), cadence={"nodes": (10, 0.0)}, disk_every_s=0)
    assert job is not None and follower.running
    while follower.running:
        follower.poll()
        time.sleep(0.02)
    follower.poll()
    on_disk, _ = job.metrics_since(0)
    assert records == on_disk == follower.records  # every record, in order, none twice
    # snapshots in order, each version at most once (the end of training publishes the last step again), the last
    assert snapshots == sorted(snapshots) and len(snapshots) <= job.latest("nodes")[0] and snapshots[-1] == 60
    assert "completed" in follower.status.message and job.run.id in follower.status.message
    assert follower.status.alert.visible is False


def test_busy_manager_is_shown_and_nothing_starts(manager):
    other = manager.start_thread(tiny())  # training: it holds the one slot (a paused job holds none)
    follower = JobFollower(manager)
    assert follower.start(tiny()) is None and follower.job is None
    assert follower.status.alert.visible and "busy: 1 of 1" in shown(follower.status.alert)
    other.stop()


def test_on_demand_snapshots_are_requested_after_each_poll(manager):
    follower = JobFollower(manager)
    follower.on_snapshot("nodes", lambda snapshot: None)
    follower.start(tiny(), cadence={"nodes": (1, 0.0)}, on_demand=("nodes",), disk_every_s=0)
    job = follower.job
    assert wait_until(lambda: job.latest("nodes") is not None, 60)  # the start snapshot is forced
    assert _trains_on(job) and job.latest("nodes")[0] == 1  # nobody asked: twenty steps on, nothing more was built
    follower.want("nodes")  # asks at once
    assert wait_until(lambda: job.latest("nodes")[0] >= 2, 60)
    assert _trains_on(job) and job.latest("nodes")[0] == 2  # one request, one snapshot
    # the request was used up before that snapshot landed, so the poll's is a new one: exactly one more snapshot
    follower.poll()
    assert wait_until(lambda: job.latest("nodes")[0] >= 3, 60)
    assert _trains_on(job) and job.latest("nodes")[0] == 3
    follower.forget()
    assert follower.job is None


def _trains_on(job, steps: int = 20) -> bool:
    """Wait until ``job`` has logged ``steps`` more steps than now (a span of training, however slow the machine)."""
    def logged() -> int:
        return max((r["step"] for r in job.metrics_since(0)[0]), default=0)

    start = logged()
    return wait_until(lambda: logged() >= start + steps, 60)


def test_a_discarded_follower_stops_its_job(manager):
    follower = JobFollower(manager)
    job = follower.start(tiny())
    assert job.is_alive()
    del follower
    gc.collect()
    assert wait_until(lambda: not job.is_alive(), 10)
    assert job.status()["state"] == "stopped"  # stopped cleanly: its folder and checkpoint stay
    assert job.run.has_checkpoint("last")


def test_a_job_that_ends_during_a_poll_is_polled_once_more(manager):
    """The run ends while a page draws its records (the page's handler is slow): the status line still reaches the
    final state, because the follower polls a job it saw alive once more."""

    async def follow() -> JobFollower:
        follower = JobFollower(manager, period=50)
        # the first records arrive while the job trains; drawing them takes until the run has ended
        follower.on_metrics(lambda records: follower.job.wait(timeout=60))
        job = follower.start(tiny(**{"train.max_steps": 200, "train.eval_every": 10}), disk_every_s=0)
        assert job is not None
        end = None  # once the job has ended: the deadline of the follower's last poll
        while "completed" not in follower.status.message and (end is None or time.monotonic() < end):
            await asyncio.sleep(0.05)  # the follower polls on this loop, every 50 ms
            if end is None and not job.is_alive():
                end = deadline(5)
        return follower

    follower = asyncio.run(follow())
    assert "completed" in follower.status.message, follower.status.message


def test_a_paced_follower_hands_a_snapshot_over_once_the_browser_has_drawn_the_last_and_asks_one_ahead(manager):
    """With its live view wrapped in a FrameClock the follower hands the browser a snapshot only when it has painted the
    last one it was sent, and asks for the next one as it hands one over: while the browser is behind, the job builds
    exactly one more, which waits, and the browser's answer gets it at once (with the next one asked for)."""
    import panel as pn

    drawn: list[int] = []
    follower = JobFollower(manager)
    follower.on_snapshot("nodes", lambda snapshot: drawn.append(int(snapshot["step"])))
    clock = follower.pace(pn.pane.Markdown("grid"))
    clock.drawn = 0  # a browser shows the clock and has drawn everything it was sent (nothing yet)
    job = follower.start(tiny(), cadence={"nodes": (1, 0.0)}, on_demand=("nodes",), disk_every_s=0)
    follower.want("nodes")  # ready: asked at once (the forced first snapshot may use that request up)
    assert wait_until(lambda: job.latest("nodes") is not None, 60)
    follower.poll()  # hands the newest over: one sent, not yet drawn, and the next one asked for
    assert clock.sent == 1 and not clock.ready and len(drawn) == 1
    assert wait_until(lambda: job.latest("nodes")[0] >= 2, 60)  # built while the browser paints
    version = job.latest("nodes")[0]
    assert _trains_on(job)
    follower.poll()  # it trained 20 steps on and built no other; the one built waits for the browser
    assert job.latest("nodes")[0] == version and clock.sent == 1 and len(drawn) == 1
    clock.drawn = clock.sent  # the browser painted the last while on screen: the waiting one is handed over at once
    assert clock.sent == 2 and len(drawn) == 2 and drawn[1] > drawn[0] and not clock.ready
    assert wait_until(lambda: job.latest("nodes")[0] == version + 1, 60)  # and the next one is built meanwhile
    follower.forget()


def test_snapshots_are_drawn_when_they_land_not_at_the_next_poll(manager, monkeypatch):
    """On an event loop (a kernel's) a snapshot that lands is drawn on that loop at once, though the follower's
    status poll is ten seconds away: five snapshots drawn with no poll but the first, each once, in order."""
    steps: list[int] = []
    calls = []
    poll = JobFollower.poll
    monkeypatch.setattr(JobFollower, "poll", lambda self: calls.append(1) or poll(self))

    async def follow() -> int:
        follower = JobFollower(manager, period=10_000)
        follower.on_snapshot("nodes", lambda snapshot: steps.append(int(snapshot["step"])))
        follower.start(tiny(), cadence={"nodes": (5, 0.0)}, disk_every_s=0)
        end = deadline(60)
        while len(steps) < 5 and time.monotonic() < end:
            await asyncio.sleep(0.02)
        polled = len(calls)
        follower.forget()
        return polled

    polls = asyncio.run(follow())
    # no poll but the one at the start, at most
    assert len(steps) >= 5 and steps == sorted(set(steps)) and polls <= 1, (steps, polls)
