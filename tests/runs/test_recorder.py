"""The run recorder keeps best.pt the best model, also when the evaluations that made it were set aside."""

import math

import torch

from lab.runs.recorder import RunRecorder
from lab.runs.store import RunStore


class _Trainer:
    def __init__(self, step: int) -> None:
        self.step, self.epoch, self.total_steps, self.last_eval = step, 0, 100, {}

    def state_dict(self) -> dict:
        return {"model": {"w": torch.full((2,), float(self.step))}, "step": self.step}


def test_best_pt_is_replaced_only_by_a_better_model_than_the_one_it_was_saved_with(tmp_path):
    run = RunStore(tmp_path).create("r")
    run.append_metrics({"kind": "eval", "step": 10, "test_acc": 0.5})  # what stayed after a rewind
    run.save_checkpoint({"model": {}, "step": 30, "best_acc": 0.9}, "best")  # from an evaluation set aside
    recorder = RunRecorder(run, tensorboard=False, checkpoint_on_eval=False)
    trainer = _Trainer(step=10)
    recorder.on_train_start(trainer)
    assert recorder.best_acc == 0.9
    trainer.step = 20
    recorder.on_eval_end(trainer, {"test_acc": 0.7})
    assert run.load_checkpoint("best")["step"] == 30  # 0.7 is worse than best.pt's 0.9: kept
    trainer.step = 40
    recorder.on_eval_end(trainer, {"test_acc": 0.95})
    best = run.load_checkpoint("best")
    assert best["step"] == 40 and best["best_acc"] == 0.95
    recorder.close()


def test_without_a_best_checkpoint_the_records_decide(tmp_path):
    run = RunStore(tmp_path).create("r")
    recorder = RunRecorder(run, tensorboard=False)
    recorder.on_train_start(_Trainer(step=0))
    assert recorder.best_acc == -math.inf
    (run.checkpoint_path("best")).write_bytes(b"torn")
    recorder.on_train_start(_Trainer(step=0))
    assert recorder.best_acc == -math.inf  # an unreadable best.pt is no saved best


def test_checkpoints_are_copied_between_steps_written_in_the_background_and_by_time(tmp_path, monkeypatch):
    """The first evaluation's state is written at once, later ones at most every checkpoint_s seconds, the last
    one at the end of training (also after a divergence: it is the last finite state); a state changed after its
    evaluation is written as it was then."""
    from lab.runs import recorder as recorder_module

    clock = [1000.0]
    monkeypatch.setattr(recorder_module.time, "monotonic", lambda: clock[0])
    run = RunStore(tmp_path).create("r")
    rec = RunRecorder(run, tensorboard=False, checkpoint_s=30.0)
    trainer = _Trainer(step=0)
    rec.on_train_start(trainer)
    for step, at in ((10, 1000.0), (20, 1010.0), (30, 1020.0)):
        trainer.step, clock[0] = step, at
        rec.on_eval_end(trainer, {"test_acc": 0.1})  # never better after the first: best.pt stays at step 10
        rec.checkpoints.flush()
    assert run.load_checkpoint("last")["step"] == 10, "20 and 30 came within 30 s of the first"
    trainer.step, clock[0] = 40, 1031.0
    state = trainer.state_dict()
    trainer.state_dict = lambda: state  # the live tensors the trainer keeps changing
    rec.on_eval_end(trainer, {"test_acc": 0.1})
    state["model"]["w"].fill_(-1.0)  # training goes on after the evaluation, before the write
    rec.checkpoints.flush()
    saved = run.load_checkpoint("last")
    assert saved["step"] == 40 and torch.equal(saved["model"]["w"], torch.full((2,), 40.0))
    trainer.state_dict = _Trainer.state_dict.__get__(trainer)
    trainer.step, clock[0] = 50, 1040.0
    rec.on_eval_end(trainer, {"test_acc": 0.1})
    trainer.step = 57  # a divergence after the evaluation at 50: the trainer ends without another
    rec.on_train_end(trainer)
    assert run.load_checkpoint("last")["step"] == 50 and run.load_checkpoint("best")["step"] == 10
    rec.close()
