"""Run one experiment into a run folder: the importable entry point behind the CLI and the background jobs."""

from __future__ import annotations

import traceback
from collections.abc import Iterable
from typing import Any

from lab.config import ExperimentConfig, from_dict, to_dict
from lab.jobs.recorder import RunRecorder
from lab.jobs.store import Run
from lab.train.build import build_data, build_model
from lab.train.progress import ProgressBar
from lab.train.trainer import Callback, Diverged, Trainer


def config_of_run(run: Run) -> ExperimentConfig:
    """The resolved config saved in a run's config.json."""
    return from_dict(ExperimentConfig, run.read_config())


def make_trainer(cfg: ExperimentConfig, callbacks: Iterable[Callback] = ()) -> Trainer:
    """Model, data and trainer for ``cfg``."""
    data = build_data(cfg)
    return Trainer(build_model(cfg, data), data, cfg.train, callbacks, alpha_min=cfg.model.alpha_min)


def train_and_evaluate(cfg: ExperimentConfig, run: Run, *, callbacks: Iterable[Callback] = (),
                       resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Train ``cfg`` into ``run`` and leave the folder in a final state.

    A non-finite loss ends the run as ``diverged`` (its message names the step and the likely cause; the last
    finite checkpoint stays); a callback setting ``trainer.should_stop`` ends it as ``stopped``; an exception
    ends it as ``failed`` with the error as message, and is re-raised.

    Args:
        cfg: the experiment.
        run: its folder (config.json is written unless resuming).
        callbacks: extra subscribers (snapshot publishers, stop checks).
        resume: continue from ``checkpoints/last.pt``: model, optimizer, step and mask generator are restored
            and metrics recorded after that step are dropped, so none is duplicated.
        progress: show a tqdm progress bar.

    Returns:
        The final status dict.
    """
    recorder = RunRecorder(run)
    extra = [ProgressBar(desc=run.id)] if progress else []
    trainer = make_trainer(cfg, [recorder, *extra, *callbacks])
    try:
        if resume and run.has_checkpoint("last"):
            trainer.load_state_dict(run.load_checkpoint("last"))
            run.truncate_metrics_after(trainer.step)
        else:
            run.truncate_metrics_after(0) if resume else run.write_config(to_dict(cfg))
        trainer.fit()
    except Diverged as err:
        return run.write_status("diverged", str(err), step=err.step, epoch=trainer.epoch,
                                total_steps=trainer.total_steps, metrics=trainer.last_eval)
    except BaseException as err:
        run.write_status("failed", f"{type(err).__name__}: {err}", step=trainer.step, epoch=trainer.epoch,
                         total_steps=trainer.total_steps, traceback=traceback.format_exc(limit=20))
        raise
    finally:
        recorder.close()
    done = trainer.step >= trainer.total_steps
    state = "completed" if done else "stopped"
    message = (f"completed {trainer.step} steps" if done else f"stopped at step {trainer.step}")
    return run.write_status(state, message, step=trainer.step, epoch=trainer.epoch,
                            total_steps=trainer.total_steps, metrics=trainer.last_eval)
