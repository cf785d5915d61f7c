"""The options several commands share, each declared once: the runs folder, the progress bar, the device, a network
of the user's own instead of a run, sampling a diffusion run, training a slice of a run, and a SLURM job's resources.

Each ``add_*`` adds its options to a command's parser, first among its options as a parent parser would. Nothing
here imports torch: the parser of one command is built without loading what the others run.
"""

from __future__ import annotations

import argparse

from lab.runfolder.layout import Checkpoint
from lab.seeds import SEED_MAX


def seed(text: str) -> int:
    """A ``--seed`` value: an integer in [0, :data:`~lab.seeds.SEED_MAX`], the seeds every library the lab seeds
    takes (a larger one failed deep inside numpy or torch)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer; got {text!r}") from None
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"must be in [0, {SEED_MAX}]; got {value}")
    return value


def device(text: str) -> str:
    """A ``--device`` value: a device this machine has (:func:`~lab.train.core.device_problem`)."""
    from lab.train.core import device_problem  # here: it imports torch, which only a given --device needs yet

    problem = device_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def add_runs_dir(parser: argparse.ArgumentParser) -> None:
    """``--runs-dir``: the runs folder a command reads or writes."""
    parser.add_argument("--runs-dir", default=None, help="runs folder (default: $LAB_RUNS_DIR or ./runs)")


def add_no_progress(parser: argparse.ArgumentParser) -> None:
    """``--no-progress``."""
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_device(parser: argparse.ArgumentParser) -> None:
    """``--device``, checked against this machine as it is parsed (a usage error, nothing written)."""
    parser.add_argument("--device", default="auto", type=device, help="auto (CUDA when present), cpu, cuda[:i] or mps")


def add_network_source(parser: argparse.ArgumentParser) -> None:
    """The options that analyse a network the lab did not train (:mod:`lab.reports.imported`) instead of a run."""
    group = parser.add_argument_group("a network of your own, instead of RUN")
    group.add_argument("--model", default=None, metavar="NAME",
                       help="timm:<arch>, torchvision:<arch> (ResNets), hf:DIR (a Hugging Face save_pretrained "
                            "folder: GPT-2, Llama-style, ViT, DeiT; its weights are the folder's) or a registered "
                            "model")
    group.add_argument("--weights", default=None, metavar="FILE",
                       help="its weights: .safetensors or a PyTorch file of tensors (a release's {'model': ...}, "
                            "DDP's module. prefix)")
    group.add_argument("--data", default="digits", metavar="NAME[=DIR]",
                       help="the data it is analysed on (default digits; e.g. cifar10=/data/cifar; text=FILE for a "
                            "language model: windows of data.tokens tokens, 128 by default, read by its tokenizer)")
    group.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="another setting of the analysed experiment (repeatable), e.g. data.image_size=32 (the "
                            "side the network sees; default its own, 224 for a timm or torchvision ResNet) or "
                            "data.normalize=model|data|none (its inputs normalised with its library's mean/std, the "
                            "data's own statistics, or raw pixels in [0, 1]; default model for a library network "
                            "on its library's 3 channels, else data)")
    group.add_argument("--blocks", default=None, metavar="PATTERN",
                       help="the residual blocks of a timm/torchvision network the lab has no adapter for, by module "
                            "name (fnmatch: 'stages.*.blocks.*'); each must compute h + F(h)")
    group.add_argument("--strict", default="true", choices=["true", "false"],
                       help="false: load the keys that fit, keep the network's initialisation for the rest (named in "
                            "the output and in config.json's imported record)")


def add_sampling(parser: argparse.ArgumentParser) -> None:
    """What every command that samples a diffusion run takes besides its sampler: guidance, the checkpoint and its
    weights and the noise's seed (the device and the progress bar are :func:`add_device` and
    :func:`add_no_progress`)."""
    parser.add_argument("--guidance", type=float, default=0.0,
                        help="classifier-free guidance scale w of a class-conditional run (default 0: none)")
    parser.add_argument("--checkpoint", default=Checkpoint.LAST, metavar="last|best|step-N",
                        help="last, best, or a checkpoint kept by train.save_every (step-000050000)")
    weights = parser.add_mutually_exclusive_group()
    weights.add_argument("--ema", dest="ema", action="store_true", default=None,
                         help="the weights' moving average (default when the run kept one)")
    weights.add_argument("--no-ema", dest="ema", action="store_false", help="the trained weights themselves")
    parser.add_argument("--seed", type=seed, default=0, help="seed of the samples' noise (default 0)")


def add_training(parser: argparse.ArgumentParser) -> None:
    """What ``train`` and ``resume`` take besides where the run comes from: a slice of steps, and snapshots."""
    parser.add_argument("--steps", type=int, default=None, metavar="N",
                        help="train at most N steps now, then stop with a checkpoint (continue with `resume`)")
    parser.add_argument("--snapshot-every", type=int, default=0, metavar="N",
                        help="write snapshots every N steps into the run folder (0: none): node maps for toy "
                             "sets, Residual Alignment for image sets")


def add_cluster(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """What a SLURM job asks for besides its processes (``submit``, ``reproduce --executor slurm``)."""
    parser.add_argument("--partition", default=None, help="SLURM partition (default: the cluster's)")
    parser.add_argument("--cpus-per-task", type=int, default=None, help="CPUs per process (default: the cluster's)")
    parser.add_argument("--time", default="1:00:00", metavar="H:MM:SS",
                        help="time limit per job (default 1:00:00); a job is checkpointed 90 s before it and "
                             "requeued, as it is when preempted")
