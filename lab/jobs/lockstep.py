"""Train several runs in lockstep: no member starts step s + 1 before every other live member has finished step s.

The contrast at the heart of *Residual Alignment: Uncovering the Mechanisms of Residual Networks* is one network
trained with and without skip connections. Two jobs that each train at their own pace are never at the same step
when a page compares them; members of one :class:`Lockstep` are. A member that ends (completed, stopped, diverged
or failed) leaves the group, so the others go on alone. A paused member is not waited for (its job says when it is
paused, :meth:`LockstepMember.hold_when`): when a page pauses every member, one that had already passed its pause check
finishes one more step and pauses there too, instead of waiting for a paused peer and never pausing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from lab.jobs.job import PauseAware
from lab.train.core import Callback, TrainerView


class Lockstep:
    """A group of ``size`` trainers kept at the same step; :meth:`member` gives each its callback."""

    def __init__(self, size: int) -> None:
        self._steps = [0] * size
        self._done = [False] * size
        self._held: list[Callable[[], bool]] = [lambda: False] * size  # each member's "my job is paused"
        self._cond = threading.Condition()

    def member(self, index: int, stop: Callable[[], bool] = lambda: False) -> LockstepMember:
        """The callback of member ``index``; ``stop()`` true ends its wait (its job was asked to stop)."""
        return LockstepMember(self, index, stop)

    def _arrive(self, index: int, step: int, stop: Callable[[], bool]) -> None:
        with self._cond:
            self._steps[index] = step
            self._cond.notify_all()
            while not stop() and any(not done and other < step and not held()
                                     for other, done, held in zip(self._steps, self._done, self._held, strict=True)):
                self._cond.wait(0.05)

    def leave(self, index: int) -> None:
        """Member ``index`` is done (its run ended, or never started): the others stop waiting for it."""
        with self._cond:
            self._done[index] = True
            self._cond.notify_all()


class LockstepMember(Callback, PauseAware):
    """One member's callback: it waits at the end of each step for the group's other live members."""

    def __init__(self, group: Lockstep, index: int, stop: Callable[[], bool]) -> None:
        self.group, self.index, self.stop = group, index, stop

    def hold_when(self, paused: Callable[[], bool]) -> None:
        """The job training this member tells the group when it is paused; the others then do not wait for it."""
        with self.group._cond:
            self.group._held[self.index] = paused

    def on_train_start(self, trainer: TrainerView) -> None:
        with self.group._cond:
            self.group._steps[self.index] = trainer.step

    def on_step_end(self, trainer: TrainerView, loss: float) -> None:
        self.group._arrive(self.index, trainer.step, lambda: self.stop() or trainer.should_stop)

    def on_train_end(self, trainer: TrainerView) -> None:
        self.group.leave(self.index)
