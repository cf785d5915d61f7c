import threading
from types import SimpleNamespace

from lab.config import apply_overrides, load_config
from lab.jobs.lockstep import Lockstep
from lab.train.core import Callback, Diverged
from lab.train.runner import make_trainer


class Watch(Callback):
    """Records, after each step of one member, the other member's step (read through the shared list)."""

    def __init__(self, index, steps, gaps):
        self.index, self.steps, self.gaps = index, steps, gaps

    def on_step_end(self, trainer, loss):
        self.steps[self.index] = trainer.step
        self.gaps.append(abs(self.steps[0] - self.steps[1]))


def _cfg(**overrides):
    base = {"model.depth": 2, "model.width": 8, "data.n": 512, "train.batch_size": 32, "train.max_steps": 60,
            "train.epochs": 50}
    return apply_overrides(load_config(None), {**base, **overrides})


def test_members_stay_within_one_step_and_a_finished_member_releases_the_other():
    group, steps, gaps = Lockstep(2), [0, 0], []
    # member 0 is made slow (a wider net), member 1 ends after 20 steps
    slow = make_trainer(_cfg(**{"model.width": 64, "model.depth": 8}), [group.member(0), Watch(0, steps, gaps)])
    short = make_trainer(_cfg(**{"train.max_steps": 20}), [group.member(1), Watch(1, steps, gaps)])
    threads = [threading.Thread(target=t.fit) for t in (slow, short)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a member waited for one that had finished"
    assert (slow.step, short.step) == (60, 20)
    # while both trained, neither got ahead of the other by more than the step it was taking
    assert max(gaps[:2 * 20 - 2]) <= 1


def test_a_diverging_member_leaves_the_group():
    group = Lockstep(2)
    ok = make_trainer(_cfg(**{"train.max_steps": 30}), [group.member(0)])
    bad = make_trainer(_cfg(**{"train.optimizer": "sgd", "train.lr": 50.0}), [group.member(1)])
    errors = []

    def fit_bad():
        try:
            bad.fit()
        except Diverged as err:
            errors.append(err)

    threads = [threading.Thread(target=ok.fit), threading.Thread(target=fit_bad)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors and ok.step == 30 and not any(t.is_alive() for t in threads)


def test_a_stop_request_ends_the_wait():
    group, stop = Lockstep(2), threading.Event()
    alone = make_trainer(_cfg(), [group.member(0, stop=stop.is_set)])  # member 1 never starts
    thread = threading.Thread(target=alone.fit)
    thread.start()
    thread.join(1.0)
    assert thread.is_alive() and alone.step == 1, "member 0 waits for member 1 after its first step"
    stop.set()
    thread.join(60)
    assert not thread.is_alive()


def test_a_member_does_not_wait_for_a_paused_one():
    """Pausing both members of a page: one that had already passed its pause check must not wait forever for the
    paused other (it would never reach its own pause); it goes on to the next step and pauses there."""
    group = Lockstep(2)
    a, b = group.member(0), group.member(1)
    paused = threading.Event()
    a.hold_when(paused.is_set)
    for member in (a, b):
        member.on_train_start(SimpleNamespace(step=0, should_stop=False))
    waiting = threading.Thread(target=b.on_step_end, args=(SimpleNamespace(step=1, should_stop=False), 0.0))
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive()  # b has finished step 1, a has not: b waits
    paused.set()
    waiting.join(2.0)
    assert not waiting.is_alive()  # a is paused: b goes on
