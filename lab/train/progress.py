"""A tqdm progress bar as a trainer callback (terminal or notebook, whichever tqdm.auto finds)."""

from __future__ import annotations

from tqdm.auto import tqdm

from lab.train.core import Callback, TrainerView


class ProgressBar(Callback):
    """Steps done out of the total, with the latest loss and test accuracy in the postfix."""

    def __init__(self, desc: str = "train", **tqdm_kwargs) -> None:
        self.desc, self.kwargs, self.bar = desc, tqdm_kwargs, None

    def on_train_start(self, trainer: TrainerView) -> None:
        self.bar = tqdm(total=trainer.total_steps, initial=trainer.step, desc=self.desc, unit="step",
                        dynamic_ncols=True, **self.kwargs)

    def on_step_end(self, trainer: TrainerView, loss: float) -> None:
        self.bar.update(1)
        if trainer.step % trainer.cfg.log_every == 0:
            self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)

    def on_eval_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        if "test_acc" in metrics:
            self.bar.set_postfix(epoch=trainer.epoch, test_acc=f"{metrics['test_acc']:.3f}", refresh=False)

    def on_train_end(self, trainer: TrainerView) -> None:
        if self.bar is not None:
            self.bar.close()
