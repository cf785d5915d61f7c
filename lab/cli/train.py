"""``train CONFIG [overrides]``: one run trained into a new run folder (or ``--run-dir``, an empty one).

:func:`train` is also ``resume``'s body (:mod:`lab.cli.resume`): the two differ only in where the config and the
run folder come from. Both run as the processes of ``torchrun`` too (the loader engine, :func:`_train_loader`).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

from lab.cli.terminate import Terminate
from lab.config import ConfigError, ExperimentConfig, load_config
from lab.data.toy2d import TOY_DATASETS, ToyData
from lab.runfolder.layout import RunState
from lab.runfolder.lock import RunLocked, guard_folder
from lab.runs.fresh import check_fresh_run
from lab.runs.store import Run, RunStore
from lab.snapshots.builders import alignment_builder
from lab.snapshots.kinds import ALIGNMENT, NODES
from lab.snapshots.publish import DiskSink, Publisher
from lab.train.core import Callback, check_device
from lab.train.distributed import broadcast, close_world, init_world
from lab.train.loader import ResumeMismatch
from lab.train.requires import require_extras
from lab.train.resume import ResumePlan, ResumeRefused
from lab.train.runner import checked_data, resolved, train_and_evaluate, uses_loader
from lab.train.stop import StopFile

Source = Callable[[], tuple[ExperimentConfig, Run | None, ResumePlan | None]]
"""What a training starts from: the config to train, the run folder when it exists already (``resume``,
``--run-dir``) and, for a resume, how it continues. It raises what refuses the training, before anything is
written."""


def run(args: argparse.Namespace, store: RunStore) -> int:
    """``train``: the exit status of :func:`lab.cli.main`."""
    def fresh() -> tuple[ExperimentConfig, Run | None, None]:
        cfg = load_config(args.config, args.overrides)
        return cfg, check_fresh_run(args.run_dir) if args.run_dir else None, None

    return train(args, store, fresh)


def train(args: argparse.Namespace, store: RunStore, source: Source) -> int:
    """Train what ``source()`` gives (``train`` and ``resume``): 0 completed or stopped, 1 diverged or failed, 2 bad
    input or a refused resume, with nothing written.

    Everything that can be refused is refused before a run folder is made: the config and what it is resumed from,
    the device, the extras the config needs (:func:`~lab.train.requires.require_extras`, which
    :func:`lab.cli.main` reports), the lock's folder and the data.
    """
    if args.steps is not None and args.steps < 1:
        print("error: --steps must be >= 1", file=sys.stderr)
        return 2
    try:
        with warnings.catch_warnings(record=True) as caught:  # e.g. a renamed key: say so, then carry on
            warnings.simplefilter("always", DeprecationWarning)
            cfg, run, plan = source()
        cfg = resolved(cfg)  # the engine is decided once and saved with the run
        check_device(cfg.train.device)
        require_extras(cfg)
        guard_folder()  # where taking over a stale lock is serialised: refused here, not once the folder exists
        if uses_loader(cfg):
            return _train_loader(args, cfg, run, plan, store)
        data = checked_data(cfg)
    except (ConfigError, FileNotFoundError, ValueError, PermissionError) as err:
        # RunFolderError, ResumeRefused, data errors, no folder of the user's own for lock guards: nothing written
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        for w in caught:
            print(f"warning: {w.message}", file=sys.stderr)
    run = run or store.create(args.name or cfg.name)
    print(f"run folder: {run.path}", file=sys.stderr)
    callbacks: list[Callback] = [StopFile(run), Terminate()]
    if args.snapshot_every > 0:
        callbacks.append(_snapshot_publisher(cfg, run, args.snapshot_every, data))
    try:
        status = train_and_evaluate(cfg, run, callbacks=callbacks, resume=plan or False, data=data,
                                    progress=not args.no_progress, steps=args.steps)
    except (RunLocked, ResumeRefused) as err:  # nothing was written
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{status['state']}: {status['message']}", file=sys.stderr)
    return 0 if status["state"] in (RunState.COMPLETED, RunState.STOPPED) else 1


def _snapshot_publisher(cfg: ExperimentConfig, run: Run, every: int, data: ToyData) -> Publisher:
    """Node maps for toy sets (2-D inputs), Residual Alignment snapshots for image sets."""
    if cfg.data.name in TOY_DATASETS:
        return Publisher(DiskSink(run, every_s=0.0), {NODES: (every, 0.0)})
    builder = alignment_builder(data)  # K = 30 as the paper's Fig. 2, capped at the blocks' size
    return Publisher(DiskSink(run, every_s=0.0), {ALIGNMENT: (every, 0.0)}, {ALIGNMENT: builder})


def _train_loader(args: argparse.Namespace, cfg: ExperimentConfig, run: Run | None, plan: ResumePlan | None,
                  store: RunStore) -> int:
    """``train``/``resume`` with the loader engine, as one of the processes ``torchrun`` started (or alone).

    Every process checks the data before any folder is made or any step taken; rank 0 makes the run folder and
    tells the others where it is.
    """
    if args.snapshot_every > 0:
        print("error: --snapshot-every applies to the tensor trainer; loader runs record rank and reconstructions "
              "at each evaluation", file=sys.stderr)
        return 2
    try:
        data = checked_data(cfg, int(os.environ.get("WORLD_SIZE", "1")))
    except (FileNotFoundError, ValueError) as err:  # DatasetNotFoundError and FormatError included: nothing written
        print(f"error: {err}", file=sys.stderr)
        return 2
    world = init_world(cfg.train.device)
    try:
        if run is None:
            run = Run(Path(broadcast(world, str(store.create(args.name or cfg.name).path) if world.main else None)))
        if world.main:
            print(f"run folder: {run.path} ({world.size} process{'es' if world.size > 1 else ''}, "
                  f"{world.device.type})", file=sys.stderr)
        status = train_and_evaluate(cfg, run, callbacks=[StopFile(run), Terminate()], world=world, data=data,
                                    resume=plan or False, progress=not args.no_progress, steps=args.steps)
    except (ResumeMismatch, ResumeRefused, RunLocked) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        close_world(world)
    if world.main:
        print(f"{status['state']}: {status['message']}", file=sys.stderr)
    return 0 if status["state"] in (RunState.COMPLETED, RunState.STOPPED) else 1
