"""Command line: ``python -m lab train CONFIG [section.key=value ...] [--runs-dir DIR]`` and ``resume RUN``."""

from __future__ import annotations

import argparse
import signal
import sys
import warnings
from pathlib import Path

from lab.config import ConfigError, ExperimentConfig, load_config
from lab.jobs.process import StopFile
from lab.jobs.runner import config_of_run, train_and_evaluate
from lab.jobs.snapshots import DiskSink, Publisher
from lab.jobs.store import Run, RunStore, default_runs_dir
from lab.train.trainer import Callback, Trainer


class _Terminate(Callback):
    """SIGTERM/SIGINT end the run cleanly as ``stopped`` after the current step (a checkpoint is kept)."""

    def __init__(self) -> None:
        self.requested = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handler)

    def _handler(self, signum: int, frame) -> None:
        if self.requested:  # a second signal: give up at once
            raise KeyboardInterrupt
        self.requested = True

    def on_step_end(self, trainer: Trainer, loss: float) -> None:
        if self.requested:
            trainer.should_stop = True


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab", description="Residual Lab experiments.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a config into a new run folder")
    train.add_argument("config", help="YAML config, e.g. configs/spiral.yaml")
    train.add_argument("overrides", nargs="*", help="dotted overrides such as model.depth=16 train.lr=0.01")
    where = train.add_mutually_exclusive_group()
    where.add_argument("--runs-dir", default=None, help="runs folder (default: $LAB_RUNS_DIR or ./runs)")
    where.add_argument("--run-dir", default=None, help="write into this existing run folder instead")
    train.add_argument("--name", default=None, help="run name (default: the config's name)")
    resume = sub.add_parser("resume", help="continue a run from its last checkpoint")
    resume.add_argument("run", help="run id (in the runs folder) or a run folder's path")
    resume.add_argument("--runs-dir", default=None)
    for p in (train, resume):
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        p.add_argument("--snapshot-every", type=int, default=0, metavar="N",
                       help="write the node-map snapshot every N steps into the run folder (0: none)")
    return parser


def _config_and_run(args: argparse.Namespace, store: RunStore) -> tuple[ExperimentConfig, Run]:
    """The config to train and the run folder to train it into, for ``train`` or ``resume``."""
    if args.command == "train":
        cfg = load_config(args.config, args.overrides)
        if args.run_dir:
            run = Run(Path(args.run_dir))
            if not run.path.is_dir():
                raise FileNotFoundError(f"run folder {run.path} does not exist")
        else:
            run = store.create(args.name or cfg.name)
        return cfg, run
    path = Path(args.run)
    run = Run(path) if path.is_dir() else store.open(args.run)
    return config_of_run(run), run


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 completed or stopped, 1 diverged or failed, 2 bad input)."""
    args = _parser().parse_args(argv)
    store = RunStore(args.runs_dir or default_runs_dir())
    try:
        with warnings.catch_warnings(record=True) as caught:  # e.g. a renamed key: say so, then carry on
            warnings.simplefilter("always", DeprecationWarning)
            cfg, run = _config_and_run(args, store)
    except (ConfigError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        for w in caught:
            print(f"warning: {w.message}", file=sys.stderr)
    print(f"run folder: {run.path}", file=sys.stderr)
    callbacks: list[Callback] = [StopFile(run), _Terminate()]
    if args.snapshot_every > 0:
        callbacks.append(Publisher(DiskSink(run, every_s=0.0), {"nodes": (args.snapshot_every, 0.0)}))
    status = train_and_evaluate(cfg, run, callbacks=callbacks, resume=args.command == "resume",
                                progress=not args.no_progress)
    print(f"{status['state']}: {status['message']}", file=sys.stderr)
    return 0 if status["state"] in ("completed", "stopped") else 1


if __name__ == "__main__":
    sys.exit(main())
