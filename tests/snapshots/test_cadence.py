"""The one rule of when a snapshot kind is due, shared by every publisher."""

from lab.snapshots.cadence import Cadence


def test_every_n_steps_never_twice_at_one_step():
    cadence = Cadence({"a": (3, 0.0)})
    assert cadence.due("a", 0)  # no snapshot yet
    cadence.built("a", 0, now=0.0)
    assert [s for s in range(1, 8) if cadence.due("a", s, now=0.0)] == [3, 4, 5, 6, 7]
    cadence.built("a", 3, now=0.0)
    assert not cadence.due("a", 3, now=0.0) and not cadence.due("a", 5, now=0.0) and cadence.due("a", 6, now=0.0)


def test_every_t_seconds_counts_from_the_snapshot_s_time():
    cadence = Cadence({"a": (0, 2.0)})
    cadence.built("a", 0, now=10.0)
    assert not cadence.due("a", 5, now=11.9)
    assert cadence.due("a", 5, now=12.0)


def test_on_demand_needs_a_request_and_one_snapshot_uses_it_up():
    cadence = Cadence({"a": (1, 0.0)}, on_demand=("a",))
    assert not cadence.due("a", 0)
    cadence.request("a")
    assert cadence.due("a", 0) and cadence.due("a", 0)  # asking does not use the request up
    cadence.built("a", 0)
    assert not cadence.due("a", 1)


def test_a_forced_snapshot_is_due_regardless_and_answers_a_request():
    cadence = Cadence({"a": (100, 0.0)}, on_demand=("a",))
    cadence.built("a", 5)
    assert cadence.due("a", 5, force=True)
    cadence.request("a")
    cadence.built("a", 5)
    assert not cadence.due("a", 200)
