"""What the commands that measure a run share (``analyze``, ``probe``, ``sample``, ``fid``): the run they read, or
a network of the user's own imported as a run first, and how a result and a refusal are printed."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from lab.config import ConfigError
from lab.nn.hf import HF_PREFIX
from lab.reports.imported import data_settings, import_weights
from lab.runs.store import CheckpointError, Run, RunStore
from lab.train.resume import find_run


def report(args: argparse.Namespace, store: RunStore, measure: Callable[[Run], tuple[str, str]]) -> int:
    """Run a report on the run ``args.run`` names: ``measure(run)`` returns its result line (printed) and what it
    wrote (to stderr); a bad run, checkpoint or setting is an error line and exit status 2, with nothing written."""
    try:
        run = source(args, store)
        result, wrote = measure(run)
    except (ConfigError, FileNotFoundError, CheckpointError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(result)
    print(wrote, file=sys.stderr)
    return 0


def source(args: argparse.Namespace, store: RunStore) -> Run:
    """The run a report reads: ``args.run``, or the network ``--model`` with ``--weights``, imported as a run first.

    Raises:
        ValueError: neither or both, or a bad setting; and what :func:`~lab.reports.imported.import_weights` raises.
    """
    model = getattr(args, "model", None)  # the commands that sample (sample, fid) take runs only
    if (args.run is None) == (model is None):
        raise ValueError("name a run, or a network with --model NAME --weights FILE (not both)")
    if args.run is not None:
        return find_run(args.run, store)
    if args.weights is None and not model.startswith(HF_PREFIX):
        raise ValueError("--model needs --weights FILE (the lab downloads nothing; a Hugging Face folder, hf:DIR, "
                         "holds its own)")
    settings = data_settings(args.data, args.set)
    run, imported = import_weights(store, args.model, args.weights, settings, strict=args.strict == "true",
                                   blocks=args.blocks)
    print(f"imported {args.model} from {imported.name} into {run.path} ({imported.text()})", file=sys.stderr)
    return run
