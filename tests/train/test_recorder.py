"""The run recorder keeps best.pt the best model, also when the evaluations that made it were set aside."""

import math

import torch

from lab.runs.store import RunStore
from lab.train.checkpoint import load_checkpoint, save_checkpoint
from lab.train.recorder import RunRecorder, copied


class _Trainer:
    def __init__(self, step: int) -> None:
        self.step, self.epoch, self.total_steps, self.last_eval = step, 0, 100, {}

    def state_dict(self) -> dict:
        return {"model": {"w": torch.full((2,), float(self.step))}, "step": self.step}


def test_best_pt_is_replaced_only_by_a_better_model_than_the_one_it_was_saved_with(tmp_path):
    run = RunStore(tmp_path).create("r")
    run.append_metrics({"kind": "eval", "step": 10, "test_acc": 0.5})  # what stayed after a rewind
    save_checkpoint(run, {"model": {}, "step": 30, "best_acc": 0.9}, "best")  # from an evaluation set aside
    recorder = RunRecorder(run, tensorboard=False, checkpoint_on_eval=False)
    trainer = _Trainer(step=10)
    recorder.on_train_start(trainer)
    assert recorder.best_acc == 0.9
    trainer.step = 20
    recorder.on_eval_end(trainer, {"test_acc": 0.7})
    assert load_checkpoint(run, "best")["step"] == 30  # 0.7 is worse than best.pt's 0.9: kept
    trainer.step = 40
    recorder.on_eval_end(trainer, {"test_acc": 0.95})
    best = load_checkpoint(run, "best")
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
    from lab.train import recorder as recorder_module

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
    assert load_checkpoint(run, "last")["step"] == 10, "20 and 30 came within 30 s of the first"
    trainer.step, clock[0] = 40, 1031.0
    state = trainer.state_dict()
    trainer.state_dict = lambda: state  # the live tensors the trainer keeps changing
    rec.on_eval_end(trainer, {"test_acc": 0.1})
    state["model"]["w"].fill_(-1.0)  # training goes on after the evaluation, before the write
    rec.checkpoints.flush()
    saved = load_checkpoint(run, "last")
    assert saved["step"] == 40 and torch.equal(saved["model"]["w"], torch.full((2,), 40.0))
    trainer.state_dict = _Trainer.state_dict.__get__(trainer)
    trainer.step, clock[0] = 50, 1040.0
    rec.on_eval_end(trainer, {"test_acc": 0.1})
    trainer.step = 57  # a divergence after the evaluation at 50: the trainer ends without another
    rec.on_train_end(trainer)
    assert load_checkpoint(run, "last")["step"] == 50 and load_checkpoint(run, "best")["step"] == 10
    rec.close()


def test_a_run_ends_with_no_checkpoint_writer_left_running(tmp_path, monkeypatch):
    """on_train_end returns once the writer thread has ended, not only its last write: a daemon thread still alive
    (holding the last checkpoint's tensors) when the process exits can abort it after the run ended well."""
    import threading
    import time

    class SlowToEnd(threading.Thread):  # a writer whose last moments (freeing what it wrote) take a while
        def run(self) -> None:
            super().run()
            time.sleep(0.3)

    monkeypatch.setattr(threading, "Thread", SlowToEnd)
    run = RunStore(tmp_path).create("r")
    rec = RunRecorder(run, tensorboard=False)
    trainer = _Trainer(step=10)
    rec.on_train_start(trainer)
    rec.on_eval_end(trainer, {"test_acc": 0.5})
    rec.on_train_end(trainer)
    assert load_checkpoint(run, "last")["step"] == 10
    assert not [t.name for t in threading.enumerate() if t.name.startswith("lab-checkpoint-")]
    rec.close()


def test_a_copied_state_is_equal_and_independent_of_the_training_that_goes_on():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 7, "masks": [torch.ones(2)],
             "rng": (torch.get_rng_state(), 3)}
    copy = copied(state)
    assert copy["model"]._metadata == state["model"]._metadata  # the version BatchNorm's loading reads
    assert copy["step"] == 7 and type(copy["rng"]) is tuple and copy["rng"][1] == 3
    for key, value in state["model"].items():
        assert torch.equal(copy["model"][key], value) and copy["model"][key].data_ptr() != value.data_ptr()
    moments = state["optimizer"]["state"][0]["exp_avg"]
    saved, weight = moments.clone(), state["model"]["0.weight"].clone()
    with torch.no_grad():  # training goes on: parameters and optimiser state change in place
        for p in model.parameters():
            p.add_(1.0)
        moments.add_(1.0)
        state["masks"][0].zero_()
    assert torch.equal(copy["optimizer"]["state"][0]["exp_avg"], saved)
    assert torch.equal(copy["model"]["0.weight"], weight) and not torch.equal(model[0].weight, weight)
    assert torch.equal(copy["masks"][0], torch.ones(2))
    model.load_state_dict(copy["model"])  # and it loads back
    optimizer.load_state_dict(copy["optimizer"])


def test_the_event_file_is_never_a_link_planted_beforehand(tmp_path):
    """The attack: someone who may write a run folder (before `lab resume`, `lab train --run-dir` or a relaunched
    reproduction) plants links under every name TensorBoard's writer would pick in the next minute (the second, the
    host, this process and its counter); a writer that opened one would truncate the file it points to."""
    import os
    import socket
    import time

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    run = RunStore(tmp_path / "runs").create("r")
    now, host, pid = int(time.time()), socket.gethostname(), os.getpid()
    for second in range(now - 2, now + 60):
        for uid in range(64):
            os.symlink(victim, run.path / f"events.out.tfevents.{second:010d}.{host}.{pid}.{uid}")
    recorder = RunRecorder(run, checkpoint_on_eval=False)
    recorder.on_train_start(_Trainer(step=0))
    recorder.writer.add_scalar("loss", 1.0, 0)
    recorder.close()
    assert victim.read_text() == "precious"
    events = [p for p in run.path.glob("events.out.tfevents.*") if not p.is_symlink()]
    assert len(events) == 1 and events[0].stat().st_size > 0  # the writer wrote its own, fresh file
