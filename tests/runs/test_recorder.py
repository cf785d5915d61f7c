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
