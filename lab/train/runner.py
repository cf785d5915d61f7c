"""Run one experiment into a run folder: the importable entry point behind the CLI and the background jobs."""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Iterable, Iterator
from typing import Any

from lab.config import GENERATIVE, LOADER_ONLY, ConfigError, ExperimentConfig, apply_overrides, to_dict
from lab.data.toy2d import ToyData
from lab.runfolder import layout
from lab.runfolder.layout import Checkpoint, RunState
from lab.runfolder.lock import RunLock, RunLocked
from lab.runfolder.writes import atomic_write_bytes
from lab.runs.store import Run, end_state, error_text
from lab.train.build import build_data, build_model, build_task, check_data, loader_data
from lab.train.core import Callback, Diverged, resolve_device
from lab.train.distributed import World, broadcast, launched_by_torchrun
from lab.train.loader import LoaderData, LoaderTrainer, ResumeMismatch
from lab.train.progress import ProgressBar
from lab.train.recorder import RunRecorder
from lab.train.resume import ResumePlan, ResumeRefused, load_resume_state, plan_resume
from lab.train.tensor import Trainer


def uses_loader(cfg: ExperimentConfig) -> bool:
    """Whether ``cfg`` trains with the loader engine (:mod:`lab.train.loader`): asked for, or ``auto`` with a
    generative task (MAE, diffusion) or under ``torchrun``. A run's saved config names its engine
    (:func:`resolved`), so a run resumes with the engine it was trained with."""
    engine = cfg.train.engine
    return engine == "loader" or (engine == "auto" and (cfg.train.task in GENERATIVE or launched_by_torchrun()))


def resolved(cfg: ExperimentConfig) -> ExperimentConfig:
    """``cfg`` with its engine decided (``auto`` → ``loader`` or ``tensor``), checked against it.

    Raises:
        ConfigError: a loader-only setting (gradient accumulation, bf16, compile, augmentation, probes) for the
            tensor engine, or the tensor engine under ``torchrun`` with several processes (each would train a
            copy of its own).
    """
    engine = "loader" if uses_loader(cfg) else "tensor"
    if engine == "tensor":
        for key, plain in LOADER_ONLY.items():
            section, name = key.split(".")
            value = getattr(getattr(cfg, section), name)
            if value not in plain:
                raise ConfigError(f"{key}={value} is a setting of the loader engine; set train.engine=loader")
        if launched_by_torchrun() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ConfigError("train.engine=tensor trains in one process; under torchrun use train.engine=loader")
    return cfg if cfg.train.engine == engine else apply_overrides(cfg, {"train.engine": engine})


def checked_data(cfg: ExperimentConfig, processes: int = 1) -> ToyData | LoaderData:
    """The data ``cfg`` trains on, built and checked (:func:`~lab.train.build.check_data`): what the command line
    and the job manager do before a run folder exists, so bad data leaves no folder behind.

    Raises:
        DatasetNotFoundError, FormatError, ValueError: the message names the problem (the first is a FileNotFoundError).
    """
    data = loader_data(cfg) if uses_loader(cfg) else build_data(cfg)
    check_data(cfg, data, processes)
    return data


def make_trainer(cfg: ExperimentConfig, callbacks: Iterable[Callback] = (), data: ToyData | None = None) -> Trainer:
    """Model, data (built from ``cfg`` unless given) and trainer for ``cfg``."""
    data = data if data is not None else build_data(cfg)
    return Trainer(build_model(cfg, data), data, cfg.train, callbacks, alpha_min=cfg.model.alpha_min,
                   task=build_task(cfg, data))


def train_and_evaluate(cfg: ExperimentConfig, run: Run, *, callbacks: Iterable[Callback] = (),
                       resume: bool | ResumePlan = False, progress: bool = True, steps: int | None = None,
                       world: World | None = None, data: LoaderData | ToyData | None = None) -> dict[str, Any]:
    """Train ``cfg`` into ``run`` and leave the folder in a final state.

    The tensor trainer runs unless :func:`uses_loader` says the loader engine; that one runs as one process of
    ``world`` (default: a world of one on ``train.device``), and only rank 0 writes the folder, holding its lock
    (:mod:`lab.runfolder.lock`) while it trains.

    A new run's config.json is written first, so a run that fails at any point leaves a complete folder: state
    ``failed`` and the reason. A non-finite loss ends the run as ``diverged`` (its message names the step and the
    likely cause; the last finite checkpoint stays); a callback setting ``trainer.should_stop`` ends it as
    ``stopped``; an exception ends it as ``failed`` with the error as message (:func:`~lab.runs.store.error_text`: type
    and message, bounded; the traceback beside it), and is re-raised.

    Args:
        cfg: the experiment (for a resume: the run's config with any resume overrides).
        run: its folder.
        callbacks: extra subscribers (snapshot publishers, stop checks).
        resume: continue the run (:mod:`lab.train.resume`): True continues from ``checkpoints/last.pt``; a
            :class:`~lab.train.resume.ResumePlan` names the checkpoint (or a restart) and the settings changed.
            Model, optimizer, step and mask generator are restored; metric records after that step are set aside
            under ``history/``, so none is duplicated and none is lost.
        progress: show a tqdm progress bar.
        steps: train at most this many steps in this call, then stop (state ``stopped``, resumable): a cluster
            job with a time limit trains in slices.
        world: the data-parallel processes (loader engine); every process calls this function.
        data: the data, when already built and checked (the CLI does so before making the folder).

    Returns:
        The final status dict (on ranks other than 0: the status rank 0 writes, not read back).

    Raises:
        ResumeRefused, RunLocked: before anything is written (the run keeps its state).
    """
    cfg = resolved(cfg)
    loader = uses_loader(cfg)
    world = world or World(device=resolve_device(cfg.train.device))
    writes = world.main
    plan = plan_resume(run) if resume is True else (resume or None)
    with _locked(run, world):
        state = load_resume_state(run, plan, world.device) if plan is not None else None
        if writes and plan is None:  # first, so a run that fails at any point has its config
            run.write_config(to_dict(cfg), world_size=world.size)
        recorder = RunRecorder(run, checkpoint_on_eval=not loader) if writes else None
        extra = [ProgressBar(desc=run.id)] if progress and writes else []
        subscribers = [*([recorder] if recorder else []), *extra, *callbacks]
        trainer: Trainer | LoaderTrainer | None = None

        def status(state: str, message: str, **fields: Any) -> dict[str, Any]:
            if trainer is not None:
                fields = {"step": trainer.step, "epoch": trainer.epoch, "total_steps": trainer.total_steps, **fields}
            return run.write_status(state, message, **fields) if writes else {"state": state, "message": message}

        try:
            if loader:
                data = data if data is not None else loader_data(cfg)
                trainer = LoaderTrainer(build_model(cfg, data), data, cfg.train, cfg.data, world, subscribers,
                                        alpha_min=cfg.model.get("alpha_min"),
                                        figure_path=run.figure_path if writes else None)
            else:
                trainer = make_trainer(cfg, subscribers, data)
            if state is not None:
                _restore(trainer, state, run)
            if writes and plan is not None:  # the checkpoint fits: only now is anything of the run moved
                _continue(cfg, run, plan)
                run.rewind_metrics(trainer.step)
            trainer.fit(steps)
        except Diverged as err:
            return status(RunState.DIVERGED, str(err), step=err.step, metrics=trainer.last_eval)
        except (ResumeMismatch, ResumeRefused):
            raise  # nothing was trained: the run keeps its state, resumable with the right processes or checkpoint
        except BaseException as err:
            status(RunState.FAILED, error_text(err), traceback=traceback.format_exc(limit=20))
            if not writes:  # rank 0 may be killed before it can tell: leave this rank's reason in the folder
                with contextlib.suppress(OSError):  # EntryError included: never written through a link
                    atomic_write_bytes(run.path / layout.failed_rank_name(world.rank),
                                       traceback.format_exc(limit=20).encode())
            raise
        finally:
            if recorder is not None:
                recorder.close()
        return status(*end_state(trainer.step, trainer.total_steps), metrics=trainer.last_eval)


@contextlib.contextmanager
def _locked(run: Run, world: World) -> Iterator[None]:
    """Hold the run's lock on rank 0 for the block; every rank learns rank 0's refusal, so under ``torchrun`` the
    others raise the same :class:`RunLocked` instead of waiting for a rank that never trains (or writing into a
    run another process trains)."""
    lock = RunLock(run.path) if world.main else None
    refusal = None
    if lock is not None:
        try:
            lock.acquire()
        except RunLocked as err:
            refusal = str(err)
    refusal = broadcast(world, refusal)
    if refusal is not None:
        raise RunLocked(refusal)
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def _continue(cfg: ExperimentConfig, run: Run, plan: ResumePlan) -> None:
    """What rank 0 writes before a resumed run trains: for a restart, the earlier attempt set aside; for a resume
    from ``best.pt``, ``last.pt`` set aside (the run goes on from an earlier step); any change of settings named in
    config.json."""
    if plan.source == "restart":
        run.set_aside()
        run.write_status(RunState.QUEUED, "restarting from step 0; the earlier attempt is in history/")
    elif plan.source == Checkpoint.BEST and run.checkpoint_path(Checkpoint.LAST).exists():
        os.replace(run.checkpoint_path(Checkpoint.LAST), run.history_path(layout.replaced_checkpoint_name(plan.step)))
    if plan.changes or plan.source != Checkpoint.LAST:
        run.add_resume_change(to_dict(cfg), plan.record())


def _restore(trainer: Trainer | LoaderTrainer, state: dict[str, Any], run: Run) -> None:
    """Load a checkpoint into ``trainer``; one that does not fit the run's model is refused, not a failed run."""
    try:
        trainer.load_state_dict(state)
    except (KeyError, RuntimeError, ValueError, TypeError) as err:
        raise ResumeRefused(f"the checkpoint of {run.id} does not fit the model of its config.json "
                            f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); nothing was "
                            "written") from None
