"""Command line: ``python -m lab train CONFIG [section.key=value ...] [--runs-dir DIR]``, ``resume RUN``,
``analyze alignment|collapse|retransformation|rank RUN [--inputs N] [--k K]``, ``probe RUN [--layer bottleneck|blocks.N]
[--epochs N]`` (linear probing on frozen features), ``sample RUN`` and ``fid RUN --reference DIR|digits``
(diffusion runs), ``sweep CONFIG key=v1,v2,... [section.key=value ...]``, ``submit CONFIG [...] --executor
slurm|local`` (a sweep as cluster jobs), ``reproduce`` and ``serve`` (the lab's pages, as ``panel serve apps/``
serves them from a checkout).

``train`` and ``resume`` also run as the processes of ``torchrun --nproc_per_node=N -m lab train CONFIG``
(data-parallel, the loader engine); ``--steps N`` trains a slice of a run and stops with a checkpoint."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from lab.analysis.residual_alignment import RA4_FIT_START
from lab.config import ConfigError, ExperimentConfig, load_config
from lab.data.latents import encode_image_folder
from lab.data.toy2d import TOY_DATASETS, ToyData
from lab.extras import MissingExtra, missing_extra
from lab.jobs.builders import alignment_builder
from lab.jobs.kinds import ALIGNMENT, NODES
from lab.jobs.publish import DiskSink, Publisher
from lab.jobs.runner import checked_data, resolved, train_and_evaluate, uses_loader
from lab.jobs.submit import EXECUTORS, Resources, SubmissionRefused, check_resources, submit_sweep
from lab.nn.diffusion import SAMPLERS
from lab.reports.alignment import alignment_report, collapse_report, format_alignment
from lab.reports.diffusion_probe import diffusion_probe_report, format_diffusion_probe
from lab.reports.fid import fid_report, fid_select_best, format_fid
from lab.reports.imported import data_settings, import_weights
from lab.reports.layer_rank import format_layer_rank, layer_rank_report
from lab.reports.probe import format_probe, probe_report
from lab.reports.retransformation import format_retransformation, retransformation_report
from lab.reports.samples import format_samples, sample_report
from lab.reproduce import BUDGETS, PAPERS, TOY_BUDGETS, reproduce, reproduce_at_scale
from lab.reproduce.claims import ERROR, MAX_SEEDS, Result
from lab.reproduce.collect import collect
from lab.reproduce.estimate import device_kind, read_throughput
from lab.reproduce.full_scale import DATASETS
from lab.reproduce.launch import EXECUTORS as REPRODUCE_EXECUTORS
from lab.reproduce.launch import PlanMismatch, failures
from lab.reproduce.plan import make_plan, parse_data, plan_text
from lab.runfolder import layout
from lab.runfolder.entries import EntryError
from lab.runfolder.layout import Checkpoint, RunState
from lab.runfolder.lock import RunLocked, guard_folder
from lab.runs.fresh import check_fresh_run
from lab.runs.resume import RESUME_KEYS, ResumePlan, ResumeRefused, find_run, plan_resume, resume_overrides
from lab.runs.stop import StopFile
from lab.runs.store import CheckpointError, Run, RunStore, config_of_run, default_runs_dir
from lab.seeds import SEED_MAX
from lab.sweeps import SweepPlan, create_sweep, plan_sweep, train_sweep
from lab.train.core import Callback, TrainerView, check_device, device_problem, resolve_device
from lab.train.distributed import broadcast, close_world, init_world, launched_by_torchrun
from lab.train.loader import ResumeMismatch
from lab.train.pretrain_eval import PROBE_TIMES

T = TypeVar("T")


class _Terminate(Callback):
    """SIGTERM/SIGINT end the run cleanly as ``stopped`` after the current step (a checkpoint is kept)."""

    def __init__(self) -> None:
        self.requested = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handler)

    def _handler(self, signum: int, frame) -> None:
        if self.requested and signum == signal.SIGINT:  # Ctrl-C twice: give up at once
            raise KeyboardInterrupt
        self.requested = True  # a scheduler's SIGTERM may come twice (itself and torchrun): one request

    def on_step_end(self, trainer: TrainerView, loss: float) -> None:
        if self.requested:
            trainer.should_stop = True


def _seed(text: str) -> int:
    """A ``--seed`` value: an integer in [0, :data:`~lab.seeds.SEED_MAX`], the seeds every library the lab seeds
    takes (a larger one failed deep inside numpy or torch)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer; got {text!r}") from None
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"must be in [0, {SEED_MAX}]; got {value}")
    return value


def _device(text: str) -> str:
    """A ``--device`` value: a device this machine has (:func:`~lab.train.core.device_problem`)."""
    problem = device_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _option(*args: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A parent parser holding one option that several commands share (``parents=[...]``)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(*args, **kwargs)
    return parent


def _network_source() -> argparse.ArgumentParser:
    """The options that analyse a network the lab did not train (:mod:`lab.reports.imported`) instead of a run."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("a network of your own, instead of RUN")
    group.add_argument("--model", default=None, metavar="NAME",
                       help="timm:<arch>, torchvision:<arch> (ResNets) or a registered model")
    group.add_argument("--weights", default=None, metavar="FILE",
                       help="its weights: .safetensors or a PyTorch file of tensors (a release's {'model': ...}, "
                            "DDP's module. prefix)")
    group.add_argument("--data", default="digits", metavar="NAME[=DIR]",
                       help="the data it is analysed on (default digits; e.g. cifar10=/data/cifar)")
    group.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="another setting of the analysed experiment, e.g. data.image_size=32 (repeatable)")
    group.add_argument("--blocks", default=None, metavar="PATTERN",
                       help="the residual blocks of a timm/torchvision network the lab has no adapter for, by module "
                            "name (fnmatch: 'stages.*.blocks.*'); each must compute h + F(h)")
    group.add_argument("--strict", default="true", choices=["true", "false"],
                       help="false: load the keys that fit, keep the model's own values for the rest (named)")
    return parent


NETWORK = _network_source()
RUNS_DIR = _option("--runs-dir", default=None, help="runs folder (default: $LAB_RUNS_DIR or ./runs)")
NO_PROGRESS = _option("--no-progress", action="store_true", help="no progress bar")
DEVICE = _option("--device", default="auto", type=_device, help="auto (CUDA when present), cpu, cuda[:i] or mps")


def _sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """What every command that samples a diffusion run takes besides its sampler: guidance, the checkpoint and its
    weights and the noise's seed (the device and the progress bar are :data:`DEVICE` and :data:`NO_PROGRESS`)."""
    parser.add_argument("--guidance", type=float, default=0.0,
                        help="classifier-free guidance scale w of a class-conditional run (default 0: none)")
    parser.add_argument("--checkpoint", default=Checkpoint.LAST, metavar="last|best|step-N",
                        help="last, best, or a checkpoint kept by train.save_every (step-000050000)")
    weights = parser.add_mutually_exclusive_group()
    weights.add_argument("--ema", dest="ema", action="store_true", default=None,
                         help="the weights' moving average (default when the run kept one)")
    weights.add_argument("--no-ema", dest="ema", action="store_false", help="the trained weights themselves")
    parser.add_argument("--seed", type=_seed, default=0, help="seed of the samples' noise (default 0)")


def _train_arguments(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``train`` and ``resume`` (one run trained now, from the start or from a checkpoint)."""
    train = sub.add_parser("train", parents=[NO_PROGRESS], help="train a config into a new run folder")
    train.add_argument("config", help="YAML config, e.g. configs/spiral.yaml")
    train.add_argument("overrides", nargs="*", help="dotted overrides such as model.depth=16 train.lr=0.01")
    where = train.add_mutually_exclusive_group()
    where.add_argument("--runs-dir", default=None, help="runs folder (default: $LAB_RUNS_DIR or ./runs)")
    where.add_argument("--run-dir", default=None, help="write into this existing run folder instead")
    train.add_argument("--name", default=None, help="run name (default: the config's name)")
    resume = sub.add_parser("resume", parents=[RUNS_DIR, NO_PROGRESS],
                            help="continue a run from its last checkpoint (or --checkpoint best, or "
                                           "--restart); what it sets aside is kept under <run>/history/")
    resume.add_argument("run", help="run id (in the runs folder) or the path of a run folder")
    resume.add_argument("overrides", nargs="*", help="settings to change from here on (recorded in config.json), "
                                                    f"e.g. train.lr=0.001; allowed: {', '.join(RESUME_KEYS)}")
    source = resume.add_mutually_exclusive_group()
    source.add_argument("--checkpoint", default=Checkpoint.LAST, choices=list(Checkpoint),
                        help="continue from last.pt (default) or best.pt")
    source.add_argument("--restart", action="store_true",
                        help="train again from step 0 with the run's config; the earlier attempt moves to history/")
    for p in (train, resume):
        p.add_argument("--steps", type=int, default=None, metavar="N",
                       help="train at most N steps now, then stop with a checkpoint (continue with `resume`)")
        p.add_argument("--snapshot-every", type=int, default=0, metavar="N",
                       help="write snapshots every N steps into the run folder (0: none): node maps for toy "
                            "sets, Residual Alignment for image sets")


def _analyze_arguments(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``analyze alignment|collapse|retransformation|rank RUN``."""
    analyze = sub.add_parser("analyze", parents=[RUNS_DIR, DEVICE, NO_PROGRESS, NETWORK],
                             help="analyse a run's checkpoint into <run>/analysis/ (or a network of your own: "
                                  "--model and --weights, imported as a run first)")
    analyze.add_argument("analysis", choices=["alignment", "collapse", "retransformation", "rank"],
                         help="alignment: RA1-RA4 and NC1-NC4; collapse: NC1-NC4 of the last layer at every checkpoint "
                              "kept by train.save_every and at last (neural collapse over training); "
                              "retransformation: each residual step's distance to the input and to the step before, "
                              "and CKA between layers (ResidualDroppath's Figure 3); rank: feature rank (Eq. 6) and a "
                              "ridge probe's accuracy at every layer, on --inputs training and test inputs")
    analyze.add_argument("run", nargs="?", help="run id (in the runs folder) or a run folder's path")
    analyze.add_argument("--inputs", type=int, default=64, help="test inputs analysed (default 64)")
    analyze.add_argument("--k", type=int, default=None, help="singular triplets per block (default 30, the paper's "
                                                            "Fig. 2; its K ranges from 10 to 30)")
    analyze.add_argument("--ra4-from", type=int, default=RA4_FIT_START + 1, metavar="BLOCK",
                         help="first block (1-based) of RA4's 1/sigma_1 fit (default 5, as the paper's Fig. 4b)")
    analyze.add_argument("--nc-inputs", type=int, default=500, help="training inputs for neural collapse")
    analyze.add_argument("--checkpoint", default=Checkpoint.LAST, choices=list(Checkpoint))


def _probe_arguments(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``probe RUN``."""
    probe = sub.add_parser("probe", parents=[RUNS_DIR, DEVICE, NO_PROGRESS, NETWORK],
                           help="linear probe on a run's frozen features into <run>/analysis/probe.json "
                                         "(a diffusion run's: analysis/diffusion_probe.json)")
    probe.add_argument("run", nargs="?", help="run id (in the runs folder) or a run folder's path")
    probe.add_argument("--layer", default="bottleneck",
                       help="bottleneck (the model's features, default) or blocks.N (block N's output, pooled)")
    probe.add_argument("--checkpoint", default=Checkpoint.LAST, choices=list(Checkpoint))
    probe.add_argument("--protocol", default=None, choices=["authors", "mae", "quick"],
                       help="authors: the released code's probe (mean of the last block's tokens, linear layer, "
                            "AdamW; default for MAE runs; for diffusion runs the paper's Appendix A.2 probe per "
                            "cell); mae: MAE's BatchNorm head with SGD on forward_features (default for "
                            "classifiers); quick: diffusion runs' default, AdamW at a constant rate with --epochs, "
                            "--lr and --batch-size")
    probe.add_argument("--noise-levels", default=None, metavar="T,T,…",
                       help="diffusion runs: the noise levels t in (0, 1] at which every block is probed (default "
                            "0.02,0.05,0.1,0.2,0.3); the cells are chosen on a validation split of the training "
                            "images and scored on the test split: the best one and the best of the deepest blocks")
    probe.add_argument("--epochs", type=int, default=200, help="probe epochs (default 200)")
    probe.add_argument("--lr", type=float, default=1e-2, help="peak learning rate, cosine-decayed to 0 (1e-2)")
    probe.add_argument("--batch-size", type=int, default=1024, help="probe batch size (default 1024)")
    probe.add_argument("--limit", type=int, default=None, metavar="N", help="at most N samples of each split")


def _sample_arguments(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``sample RUN``."""
    sample = sub.add_parser("sample", parents=[RUNS_DIR, DEVICE, NO_PROGRESS],
                            help="draw images from a diffusion run into <run>/analysis/samples-*.png and "
                                           ".npz")
    sample.add_argument("run", help="run id (in the runs folder) or a run folder's path")
    sample.add_argument("--num", type=int, default=64, help="how many samples (default 64)")
    sample.add_argument("--steps", type=int, default=50, help="sampler steps (default 50)")
    sample.add_argument("--sampler", default=None, choices=SAMPLERS,
                        help="default: the run's train.sampler. On the VP-SDE ode: probability flow, Euler (the "
                             "reference's training grids); sde: Euler-Maruyama (its FID samples, with --steps 1000). "
                             "On the discrete schedule dpm_solver: DPM-Solver++")
    _sampling_arguments(sample)


def _fid_arguments(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``fid RUN``."""
    fid = sub.add_parser("fid", parents=[RUNS_DIR, DEVICE, NO_PROGRESS],
                         help="Fréchet distance of a diffusion run's samples from reference images (FID, or "
                                     "digits-FD) appended to <run>/analysis/fid.json")
    fid.add_argument("run", help="run id (in the runs folder) or a run folder's path")
    fid.add_argument("--reference", required=True, metavar="DIR|digits",
                     help="digits: the run's training digits; or a folder of image files (e.g. CIFAR-100's training "
                          "images)")
    fid.add_argument("--features", default="inception", choices=["inception", "digits-classifier"],
                     help="inception: FID (needs --inception-weights); digits-classifier: digits-FD, in the features "
                          "of a digits classifier the lab trains (digits only; not comparable with FID)")
    fid.add_argument("--inception-weights", default=None, metavar="PATH",
                     help="a local copy of torch-fidelity's weights-inception-2015-12-05-6726825d.pth")
    fid.add_argument("--num", type=int, default=1000, help="samples drawn (default 1000; the reference's FID: 50000)")
    fid.add_argument("--steps", type=int, default=None, help="sampler steps (default: the run's train.sample_steps)")
    fid.add_argument("--sampler", default=None, choices=SAMPLERS,
                     help="default: the run's train.sampler (the reference's FID: sde with --steps 1000)")
    fid.add_argument("--reference-limit", type=int, default=50_000, metavar="N",
                     help="at most N reference images (default 50000)")
    fid.add_argument("--select", default=None, choices=[Checkpoint.BEST],
                     help="best: score every checkpoint kept by train.save_every with --select-num samples, then "
                          "the best of them (lowest distance) with --num, as the U-ViT reference selects with FID-10k "
                          "and reports FID-50k (--checkpoint is then unused)")
    fid.add_argument("--select-num", type=int, default=10_000, metavar="N",
                     help="samples per checkpoint when selecting (default 10000)")
    _sampling_arguments(fid)


def _sweep_arguments(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``sweep CONFIG key=v1,v2 …``."""
    sweep = sub.add_parser("sweep", parents=[RUNS_DIR, NO_PROGRESS],
                           help="train a sweep (comma lists; two lists sweep their product) into one "
                                         "folder of ordinary run folders, as few ensembles as possible")
    sweep.add_argument("config", help="YAML config of a residual_mlp, e.g. configs/spiral.yaml")
    sweep.add_argument("overrides", nargs="*", help="dotted overrides; a comma list is swept, e.g. "
                                                   "model.alpha_min=1.0,0.8,0.6,0.5 train.seed=0,1")


def _cluster_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """What a SLURM job asks for besides its processes (``submit``, ``reproduce --executor slurm``)."""
    parser.add_argument("--partition", default=None, help="SLURM partition (default: the cluster's)")
    parser.add_argument("--cpus-per-task", type=int, default=None, help="CPUs per process (default: the cluster's)")
    parser.add_argument("--time", default="1:00:00", metavar="H:MM:SS",
                        help="time limit per job (default 1:00:00); a job is checkpointed 90 s before it and "
                             "requeued, as it is when preempted")


def _submit_arguments(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``submit CONFIG …`` (SLURM, or local)."""
    submit = sub.add_parser("submit", parents=[RUNS_DIR],
                            help="send a sweep (comma lists) or one run to a SLURM cluster, one job per "
                                           "member writing into one sweep folder; --executor local runs the jobs "
                                           "here")
    submit.add_argument("config", help="YAML config of any model, e.g. configs/mae_vit_base_in1k.yaml")
    submit.add_argument("overrides", nargs="*", help="dotted overrides; a comma list is swept, e.g. "
                                                    "model.alpha_min=1.0,0.7 train.seed=0,1,2")
    submit.add_argument("--executor", default="slurm", choices=list(EXECUTORS),
                        help="slurm (sbatch; default) or local (submitit's local executor, on this machine)")
    submit.add_argument("--nodes", type=int, default=1, help="nodes per member (default 1)")
    submit.add_argument("--gpus-per-node", type=int, default=0, help="GPUs per node (default 0: CPUs)")
    submit.add_argument("--tasks-per-node", type=int, default=None,
                        help="training processes per node (default: one per GPU, one without GPUs)")
    _cluster_arguments(submit)
    submit.add_argument("--array-parallelism", type=int, default=64, metavar="K",
                        help="at most K members run at once (default 64)")
    waiting = submit.add_mutually_exclusive_group()
    waiting.add_argument("--wait", dest="wait", action="store_true", default=None,
                         help="wait for every job and report each member (default with --executor local)")
    waiting.add_argument("--no-wait", dest="wait", action="store_false", help="return once submitted (default with "
                                                                              "--executor slurm)")


def _latents_arguments(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``latents IMAGES``."""
    latents = sub.add_parser("latents", parents=[DEVICE, NO_PROGRESS],
                             help="encode an image folder with a local VAE into a latent folder "
                                             "(data.name=latent_folder); under torchrun each process encodes its share")
    latents.add_argument("images", help="the image folder: IMAGES/<class>/* or IMAGES/train|val/<class>/*")
    latents.add_argument("--vae", required=True, metavar="DIR",
                         help="a diffusers AutoencoderKL saved in DIR (config.json and weights), e.g. a local copy of "
                              "stabilityai/sd-vae-ft-mse; nothing is downloaded")
    latents.add_argument("--out", required=True, metavar="DIR", help="the latent folder (files already there are kept)")
    latents.add_argument("--image-size", type=int, default=256, help="side of the centre crop (default 256: 32 × 32 "
                                                                     "latents)")
    latents.add_argument("--classes", type=int, default=0, help="keep the first N classes (default all)")
    latents.add_argument("--max-per-class", type=int, default=0, help="at most N images per class (default all)")
    latents.add_argument("--train-fraction", type=float, default=0.8,
                         help="share kept for training, for a folder without train/val (default 0.8)")
    latents.add_argument("--seed", type=_seed, default=0, help="seeds that split (default 0)")
    latents.add_argument("--batch-size", type=int, default=32, help="images encoded at once (default 32)")


def _reproduce_arguments(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``reproduce``."""
    reproduce = sub.add_parser("reproduce", parents=[RUNS_DIR, NO_PROGRESS],
                               help="measure the papers' claims and write OUT/report.html, report.md "
                                                 "and claims.json")
    reproduce.add_argument("--paper", action="append", choices=list(PAPERS), default=None,
                           help="a paper to reproduce (repeatable; default all): " +
                                "; ".join(f"{k} = {v}" for k, v in PAPERS.items()))
    reproduce.add_argument("--budget", default="cpu", choices=list(BUDGETS),
                           help="smoke (seconds), cpu (toy models, within 30 minutes on 2 cores; default); at full "
                                "scale: gpu (the papers' settings), gpu1 (one GPU overnight, MNIST/CIFAR scale) or "
                                "gpu-test (every full-scale run shrunk to seconds: the pipeline on a CPU)")
    reproduce.add_argument("--seeds", type=int, default=None, help="seeds of every experiment (default: cpu each "
                                                                  "experiment its own, 3 to 10, as its claims' power "
                                                                  "needs; gpu 3; smoke and gpu-test 1)")
    reproduce.add_argument("--workers", type=int, default=None, help="toy budgets: experiments measured at once, each "
                           "in a process of its own (default: cpu 2, smoke 1; at most the machine's cores)")
    reproduce.add_argument("--out", default=None, help="report folder (default: RUNS_DIR/reproduce-<time>); at full "
                                                      "scale, the same folder again continues its runs")
    scale = reproduce.add_argument_group("full scale (gpu, gpu1, gpu-test)")
    scale.add_argument("--data", action="append", default=[], metavar="NAME=DIR",
                       help="a local data set (repeatable): " + "; ".join(f"{d.name} = {d.what}"
                                                                          for d in DATASETS.values()))
    scale.add_argument("--dry-run", action="store_true", help="print the plan (every run, its data, GPU-hours) and "
                                                              "run nothing")
    scale.add_argument("--executor", default="local", choices=list(REPRODUCE_EXECUTORS),
                       help="local: torchrun per run on this machine's GPUs (or CPUs), waiting, then the report; "
                            "slurm: one job per run through submitit, not waiting (run the command again to "
                            "continue, or --collect)")
    scale.add_argument("--retry-failed", action="store_true", help="train (or step) failed runs again instead of "
                                                                   "reporting them")
    scale.add_argument("--collect", default=None, metavar="DIR",
                       help="judge the claims of the reproduction in DIR from its finished runs and write its report")
    scale.add_argument("--throughput", default=None, metavar="FILE",
                       help="the throughput records the estimates read (default RUNS_DIR/throughput.jsonl; "
                            "`lab throughput mae|uvit --record FILE` writes them)")
    scale.add_argument("--device-kind", default=None, metavar="NAME",
                       help="estimate for this device (default: this machine's first GPU, else cpu)")
    _cluster_arguments(scale)


def _serve_arguments(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``serve``."""
    serve = sub.add_parser("serve", parents=[RUNS_DIR],
                           help="serve the lab's pages at http://127.0.0.1:PORT/apps (as `panel serve apps/` "
                                         "does from a checkout) until Ctrl-C")
    serve.add_argument("--port", type=int, default=5006, help="port (default 5006; 0: a free one)")
    serve.add_argument("--address", default="127.0.0.1", help="interface to listen on (default: loopback only)")
    serve.add_argument("--max-jobs", type=int, default=2, help="training jobs at once (default 2)")
    serve.add_argument("--threads", action="store_true", help="train the pages' runs in the server's threads "
                                                             "instead of child processes")
    serve.add_argument("--show", action="store_true", help="open a browser tab")


def _throughput_arguments(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``throughput mae|uvit``."""
    throughput = sub.add_parser("throughput", help="images per second of the MAE or the U-ViT's training step on this "
                                                   "device; --record FILE feeds `reproduce --dry-run`'s GPU-hours")
    throughput.add_argument("what", choices=["mae", "uvit"])
    throughput.add_argument("--model", default=None, help="registered model (default: the paper's on CUDA, a tiny "
                                                          "one on a CPU)")
    throughput.add_argument("--batch", type=int, default=None)
    throughput.add_argument("--steps", type=int, default=None, help="steps per timing")
    throughput.add_argument("--repeats", type=int, default=3, help="timings (their median is reported)")
    throughput.add_argument("--compile", action="store_true", help="add a torch.compile row")
    throughput.add_argument("--record", default=None, metavar="FILE",
                            help="append the engine's fastest rate to FILE (`reproduce --dry-run --throughput FILE`)")
    throughput.add_argument("--data", default=None, help="MAE: an ImageFolder root, for a data-loading row")
    throughput.add_argument("--workers", type=int, default=8)


def _throughput(args: argparse.Namespace) -> int:
    """``throughput``: prints the table; 2 for bad input."""
    from lab.reproduce.throughput import Settings, defaults, measure, text_table

    if min(v for v in (args.batch, args.steps, args.repeats, args.workers) if v is not None) < 1:
        print("error: --batch, --steps, --repeats and --workers must be >= 1", file=sys.stderr)
        return 2
    base = defaults(args.what)
    settings = Settings(args.model or base.model, args.batch or base.batch, args.steps or base.steps, args.repeats,
                        args.compile, args.data, args.workers)
    try:
        head, rows = measure(args.what, settings, args.record)
    except (ConfigError, ValueError) as err:  # an unknown model, a model of another kind
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(head)
    print(text_table(["what", "images/s", "× plain"], rows))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab", description="Residual Lab experiments.")
    sub = parser.add_subparsers(dest="command", required=True)
    for arguments in (_train_arguments, _analyze_arguments, _probe_arguments, _sample_arguments, _fid_arguments,
                      _sweep_arguments, _submit_arguments, _latents_arguments, _reproduce_arguments, _serve_arguments,
                      _throughput_arguments):
        arguments(sub)
    return parser


def _serve(args: argparse.Namespace) -> int:
    """``serve``: 0 after Ctrl-C or SIGTERM (every job stopped with its checkpoint), 2 for bad input."""
    if not 0 <= args.port <= 65535 or args.max_jobs < 1:
        print("error: --port must be in 0..65535 and --max-jobs >= 1", file=sys.stderr)
        return 2
    from lab.ui.serve import serve_lab  # here: the pages import Panel, HoloViews and Bokeh

    serve_lab(args.port, args.address, runs_dir=args.runs_dir or default_runs_dir(), max_jobs=args.max_jobs,
              processes=not args.threads, show=args.show)
    return 0


def _latents(args: argparse.Namespace) -> int:
    """``latents``: 0 when the latent folder is complete, 2 for bad input (a missing VAE or image folder)."""
    if args.image_size < 8 or args.batch_size < 1 or not 0 < args.train_fraction < 1:
        print("error: --image-size must be >= 8, --batch-size >= 1 and --train-fraction in (0, 1)", file=sys.stderr)
        return 2
    device = resolve_device(args.device)
    if device.type == "cuda" and launched_by_torchrun():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    try:
        out = encode_image_folder(args.images, args.vae, args.out, image_size=args.image_size, classes=args.classes,
                                  max_per_class=args.max_per_class, train_fraction=args.train_fraction,
                                  seed=args.seed, batch_size=args.batch_size, device=device,
                                  progress=not args.no_progress)
    except (FileNotFoundError, ValueError) as err:  # VAENotFoundError, DatasetNotFoundError
        print(f"error: {err}", file=sys.stderr)
        return 2
    if (out / "latents.json").is_file():
        print(f"latent folder: {out} (train with data.name=latent_folder data.root={out})", file=sys.stderr)
    return 0


def _reproduce(args: argparse.Namespace, store: RunStore) -> int:
    """``reproduce``: 0 when the report was written (whatever the verdicts), 1 when an experiment or a run failed
    (the report is written and names it), 2 for bad input; at full scale with ``--dry-run`` or ``--executor slurm``,
    0 once planned or submitted."""
    if args.seeds is not None and not 1 <= args.seeds <= MAX_SEEDS:
        print(f"error: --seeds must be between 1 and {MAX_SEEDS}", file=sys.stderr)
        return 2
    if args.collect:
        try:
            results, paths = collect(args.collect)
        except (FileNotFoundError, ValueError) as err:  # no reproduce.json there, or not a reproduction's
            print(f"error: {err}", file=sys.stderr)
            return 2
        return _reproduce_report(results, paths)
    if args.budget not in TOY_BUDGETS:
        return _reproduce_at_scale(args, store)
    out = Path(args.out) if args.out else store.root / time.strftime("reproduce-%Y%m%d-%H%M%S")
    if (out / "claims.json").exists():
        print(f"error: {out} holds a reproduction already; choose another --out", file=sys.stderr)
        return 2
    if args.workers is not None and args.workers < 1:
        print(f"error: --workers must be at least 1, got {args.workers}", file=sys.stderr)
        return 2
    return _reproduce_report(*reproduce(out, papers=args.paper or list(PAPERS), budget=args.budget,
                                        seeds=args.seeds, progress=not args.no_progress, workers=args.workers))


def _reproduce_report(results: list[Result], paths: dict[str, Path]) -> int:
    """Print each claim's verdict and where the report is; 1 when an experiment failed."""
    width = max(len(r.claim.id) for r in results)
    for r in results:
        print(f"{r.claim.id:<{width}}  {r.verdict:<15} {r.lab_value}")
    print(f"wrote {paths['html']}, {paths['md'].name} and {paths['json'].name}", file=sys.stderr)
    errors = [r for r in results if r.verdict == ERROR]
    for r in errors:
        print(f"error: {r.claim.id}: {r.reason}", file=sys.stderr)
    return 1 if errors else 0


def _reproduce_at_scale(args: argparse.Namespace, store: RunStore) -> int:
    """``reproduce --budget gpu|gpu1|gpu-test``: plan (``--dry-run`` prints it), launch or continue, collect."""
    papers = args.paper or list(PAPERS)
    try:
        data = parse_data(args.data)
        if args.dry_run:
            device = args.device_kind or device_kind()
            rates = read_throughput(args.throughput or store.root / "throughput.jsonl", device)
            print(plan_text(make_plan(args.budget, papers, args.seeds, data), rates, device), end="")
            return 0
        resources = Resources("slurm", args.partition, cpus_per_task=args.cpus_per_task, time=args.time,
                              gpus_per_node=1)
        out = Path(args.out) if args.out else store.root / time.strftime("reproduce-%Y%m%d-%H%M%S")
        ledger = reproduce_at_scale(out, papers=papers, budget=args.budget, seeds=args.seeds, data=data,
                                    executor=args.executor, resources=resources, retry_failed=args.retry_failed,
                                    progress=not args.no_progress)
    except (ConfigError, PlanMismatch, ValueError, EntryError, RunLocked) as err:  # RunLocked: another launcher
        print(f"error: {err}", file=sys.stderr)
        return 2
    states = [record["state"] for record in ledger["runs"].values()]
    print(f"reproduction folder: {out} ({len(states)} runs: " + ", ".join(
        f"{states.count(s)} {s}" for s in dict.fromkeys(states)) + ")", file=sys.stderr)
    failed = failures(out, ledger)
    for line in failed:
        print(f"failed: {line}", file=sys.stderr)
    if ledger.get("interrupted"):
        print("interrupted: the same command run again continues", file=sys.stderr)
        return 130
    if args.executor == "slurm":
        print(f"submitted; run the same command again to continue, or `python -m lab reproduce --collect {out}`",
              file=sys.stderr)
        return 0
    code = _reproduce_report(*collect(out))
    return 1 if code or failed else 0


def _report(args: argparse.Namespace, store: RunStore, measure: Callable[[Run], tuple[str, str]]) -> int:
    """Run a report on the run ``args.run`` names: ``measure(run)`` returns its result line (printed) and what it
    wrote (to stderr); a bad run, checkpoint or setting is an error line and exit status 2, with nothing written."""
    try:
        run = _source(args, store)
        result, wrote = measure(run)
    except (ConfigError, FileNotFoundError, CheckpointError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(result)
    print(wrote, file=sys.stderr)
    return 0


def _source(args: argparse.Namespace, store: RunStore) -> Run:
    """The run a report reads: ``args.run``, or the network ``--model`` with ``--weights``, imported as a run first.

    Raises:
        ValueError: neither or both, or a bad setting; and what :func:`~lab.reports.imported.import_weights` raises.
    """
    model = getattr(args, "model", None)  # the commands that sample (sample, fid) take runs only
    if (args.run is None) == (model is None):
        raise ValueError("name a run, or a network with --model NAME --weights FILE (not both)")
    if args.run is not None:
        return find_run(args.run, store)
    if args.weights is None:
        raise ValueError("--model needs --weights FILE (the lab downloads nothing)")
    settings = data_settings(args.data, args.set)
    run, report = import_weights(store, args.model, args.weights, settings, strict=args.strict == "true",
                                 blocks=args.blocks)
    print(f"imported {args.model} from {args.weights} into {run.path} ({report.text()})", file=sys.stderr)
    return run


def _analyze(args: argparse.Namespace, store: RunStore) -> int:
    if args.inputs < 2 or (args.k is not None and args.k < 1) or args.nc_inputs < 2 or args.ra4_from < 1:
        print("error: --inputs and --nc-inputs must be >= 2, --k and --ra4-from >= 1", file=sys.stderr)
        return 2

    def measure(run: Run) -> tuple[str, str]:
        if args.analysis == "collapse":
            curve = collapse_report(run, nc_inputs=args.nc_inputs)["curve"]
            lines = [f"step {c['step']}: " + ", ".join(f"{k} {c[k]:.4g}" for k in ("nc1", "nc2_equinorm",
                                                                                    "nc2_maxangle", "nc3", "nc4")
                                                         if c[k] is not None) for c in curve]
            return "\n".join(lines), f"wrote {run.analysis_path(layout.COLLAPSE)}"
        if args.analysis == "rank":
            summary = layer_rank_report(run, points=args.inputs, checkpoint=args.checkpoint)
            return format_layer_rank(summary), f"wrote {run.analysis_path(layout.LAYER_RANK)}"
        if args.analysis == "retransformation":
            summary = retransformation_report(run, inputs=args.inputs, checkpoint=args.checkpoint)
            return format_retransformation(summary), f"wrote {run.analysis_path(layout.RETRANSFORMATION)}"
        summary = alignment_report(run, inputs=args.inputs, k=args.k, nc_inputs=args.nc_inputs,
                                   checkpoint=args.checkpoint, fit_start=args.ra4_from - 1, device=args.device,
                                   progress=not args.no_progress)
        return format_alignment(summary), (f"wrote {run.analysis_path(layout.ALIGNMENT)} and "
                                           f"{layout.ALIGNMENT_ARRAYS}")

    return _report(args, store, measure)


def _probe(args: argparse.Namespace, store: RunStore) -> int:
    if args.epochs < 1 or args.batch_size < 2 or args.lr <= 0 or (args.limit is not None and args.limit < 2):
        print("error: --epochs must be >= 1, --batch-size and --limit >= 2 and --lr > 0", file=sys.stderr)
        return 2

    def measure(run: Run) -> tuple[str, str]:
        wrote = f"wrote {run.analysis_path(layout.PROBE)}"
        if config_of_run(run).train.task == "diffusion":
            times = tuple(float(t) for t in args.noise_levels.split(",")) if args.noise_levels else PROBE_TIMES
            summary = diffusion_probe_report(run, times=times, checkpoint=args.checkpoint, epochs=args.epochs,
                                             lr=args.lr, batch_size=args.batch_size, limit=args.limit,
                                             device=args.device, protocol=args.protocol or "quick")
            return format_diffusion_probe(summary), f"wrote {run.analysis_path(layout.DIFFUSION_PROBE)}"
        summary = probe_report(run, layer=args.layer, checkpoint=args.checkpoint, protocol=args.protocol,
                               epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, limit=args.limit,
                               device=args.device, progress=not args.no_progress)
        return format_probe(summary), wrote

    return _report(args, store, measure)


def _sample(args: argparse.Namespace, store: RunStore) -> int:
    def measure(run: Run) -> tuple[str, str]:
        summary = sample_report(run, num=args.num, steps=args.steps, sampler=args.sampler, guidance=args.guidance,
                                checkpoint=args.checkpoint, ema=args.ema, seed=args.seed, device=args.device,
                                progress=not args.no_progress)
        return format_samples(summary), f"wrote {summary['png']} and {summary['npz'].name}"

    return _report(args, store, measure)


def _fid(args: argparse.Namespace, store: RunStore) -> int:
    def measure(run: Run) -> tuple[str, str]:
        settings = dict(reference=args.reference, features=args.features, steps=args.steps, sampler=args.sampler,
                        guidance=args.guidance, ema=args.ema, inception_weights=args.inception_weights,
                        reference_limit=args.reference_limit, seed=args.seed, device=args.device,
                        progress=not args.no_progress)
        if args.select == Checkpoint.BEST:
            measurement = fid_select_best(run, num=args.num, select_num=args.select_num, **settings)
        else:
            measurement = fid_report(run, num=args.num, checkpoint=args.checkpoint, **settings)
        return format_fid(measurement), f"appended to {run.analysis_path(layout.FID)}"

    return _report(args, store, measure)


def _checked(plan: Callable[[], T]) -> T | None:
    """``plan()`` (a sweep's members, built and checked), or None when the input is bad, after printing why; a
    renamed key warns once, not once per member."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DeprecationWarning)
            return plan()
    except (ConfigError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return None
    finally:
        for message in dict.fromkeys(str(w.message) for w in caught):
            print(f"warning: {message}", file=sys.stderr)


def _members_exit(statuses: list[dict]) -> int:
    """A sweep's exit code from its members' final statuses: 0 when none failed and at least one completed or was
    stopped (a diverged member is a finding of the sweep, not an error); 1 otherwise."""
    states = [s["state"] for s in statuses]
    ended = any(s in (RunState.COMPLETED, RunState.STOPPED) for s in states)
    return 0 if RunState.FAILED not in states and ended else 1


def _sweep(args: argparse.Namespace, store: RunStore) -> int:
    """``sweep``: 0 when no member failed and at least one completed or was stopped (a diverged member is a
    finding of the sweep: reported, not an error); 1 when every member diverged or one failed; 2 for bad input,
    with nothing written."""
    def checked() -> SweepPlan:
        plan = plan_sweep(args.config, args.overrides)
        for member in plan.members:
            check_device(member.config.train.device)
        return plan

    plan = _checked(checked)
    if plan is None:
        return 2
    folder, runs = create_sweep(plan, store)
    print(f"sweep folder: {folder.path} ({len(plan.members)} members in {len(plan.groups)} "
          f"ensemble{'s' if len(plan.groups) > 1 else ''})", file=sys.stderr)
    statuses = train_sweep(plan, folder, runs, progress=not args.no_progress, callbacks=[_Terminate()])
    for member, run, status in zip(plan.members, runs, statuses, strict=True):
        metrics = status.get("metrics", {})
        values = " ".join(f"{k}={v}" for k, v in member.texts.items())
        numbers = "".join(f"  {key}={metrics[key]:.4f}" for key in ("test_acc", "test_loss", "probe_acc")
                          if key in metrics and (key != "test_loss" or "test_acc" not in metrics))
        print(f"{run.id}  {values}  {status['state']}{numbers}", file=sys.stderr)
    return _members_exit(statuses)


def _submit(args: argparse.Namespace, store: RunStore) -> int:
    """``submit``: 0 once submitted (without waiting), or, waiting, when no member failed; 1 when a member failed
    or every member diverged (each failed one is named with its job id and log); 2 for bad input, with nothing
    written."""
    def plan() -> tuple[Resources, SweepPlan]:
        resources = Resources(args.executor, args.partition, args.nodes, args.gpus_per_node, args.tasks_per_node,
                              args.cpus_per_task, args.time, args.array_parallelism)
        members = plan_sweep(args.config, args.overrides, ensemble=False)
        check_resources(members, resources)
        return resources, members

    checked = _checked(plan)
    if checked is None:
        return 2
    resources, plan = checked
    try:
        sweep = submit_sweep(plan, store, resources)
    except SubmissionRefused as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"sweep folder: {sweep.folder.path} ({len(sweep.runs)} job{'s' if len(sweep.runs) > 1 else ''}, "
          f"{args.executor})", file=sys.stderr)
    for run, record in zip(sweep.runs, sweep.job_records(), strict=True):
        print(f"{run.id}  job {record['job_id']}  log {record['stderr']}", file=sys.stderr)
    if not (args.executor == "local" if args.wait is None else args.wait):
        return 0
    statuses = sweep.wait()
    for run, record, status in zip(sweep.runs, sweep.job_records(), statuses, strict=True):
        where = f"  job {record['job_id']}  log {record['stderr']}" if status["state"] == RunState.FAILED else ""
        print(f"{run.id}  {status['state']}: {status.get('message', '')}{where}", file=sys.stderr)
    return _members_exit(statuses)


def _snapshot_publisher(cfg: ExperimentConfig, run: Run, every: int, data: ToyData) -> Publisher:
    """Node maps for toy sets (2-D inputs), Residual Alignment snapshots for image sets."""
    if cfg.data.name in TOY_DATASETS:
        return Publisher(DiskSink(run, every_s=0.0), {NODES: (every, 0.0)})
    builder = alignment_builder(data)  # K = 30 as the paper's Fig. 2, capped at the blocks' size
    return Publisher(DiskSink(run, every_s=0.0), {ALIGNMENT: (every, 0.0)}, {ALIGNMENT: builder})


def _config(args: argparse.Namespace, store: RunStore) -> tuple[ExperimentConfig, Run | None, ResumePlan | None]:
    """The config to train, the run folder when it exists already (``resume``, ``--run-dir``) and, for a resume,
    how it continues. Everything that can be refused is refused here, before anything is written."""
    if args.command == "train":
        cfg = load_config(args.config, args.overrides)
        return cfg, check_fresh_run(args.run_dir) if args.run_dir else None, None
    run = find_run(args.run, store)
    cfg, changes = resume_overrides(config_of_run(run), args.overrides)
    return cfg, run, plan_resume(run, "restart" if args.restart else args.checkpoint, changes)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """The arguments; ``key=value`` overrides may also follow options (``resume RUN --checkpoint best train.lr=1e-3``),
    which argparse alone would refuse once the positionals are taken."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    late = [a for a in extra if "=" in a and not a.startswith("-")] if hasattr(args, "overrides") else []
    if len(late) < len(extra):
        parser.error(f"unrecognized arguments: {' '.join(a for a in extra if a not in late)}")
    args.overrides = [*getattr(args, "overrides", []), *late]
    return args


_FOLDERLESS: dict[str, Callable[[argparse.Namespace], int]] = {"latents": _latents, "serve": _serve,
                                                              "throughput": _throughput}
"""Commands that open no runs folder."""
_COMMANDS: dict[str, Callable[[argparse.Namespace, RunStore], int]] = {
    "analyze": _analyze, "probe": _probe, "sample": _sample, "fid": _fid, "sweep": _sweep, "submit": _submit,
    "reproduce": _reproduce}
"""Commands on a runs folder besides ``train`` and ``resume`` (:func:`_train`)."""


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 completed or stopped, 1 diverged or failed, 2 bad input or a refused
    resume, with nothing written; a sweep counts as :func:`_sweep` says)."""
    args = _parse(argv)
    try:
        if args.command in _FOLDERLESS:
            return _FOLDERLESS[args.command](args)
        store = RunStore(args.runs_dir or default_runs_dir())
        if args.command in _COMMANDS:
            return _COMMANDS[args.command](args, store)
        return _train(args, store)
    except ImportError as err:  # a command that needs an extra not installed (the pages: [ui]) says which
        missing = err if isinstance(err, MissingExtra) else missing_extra(err)
        if missing is None:
            raise
        print(f"error: {missing}", file=sys.stderr)
        return 2


def _train(args: argparse.Namespace, store: RunStore) -> int:
    """``train`` and ``resume``: the exit status of :func:`main`."""
    if args.steps is not None and args.steps < 1:
        print("error: --steps must be >= 1", file=sys.stderr)
        return 2
    try:
        with warnings.catch_warnings(record=True) as caught:  # e.g. a renamed key: say so, then carry on
            warnings.simplefilter("always", DeprecationWarning)
            cfg, run, plan = _config(args, store)
        cfg = resolved(cfg)  # the engine is decided once and saved with the run
        check_device(cfg.train.device)
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
    callbacks: list[Callback] = [StopFile(run), _Terminate()]
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
        status = train_and_evaluate(cfg, run, callbacks=[StopFile(run), _Terminate()], world=world, data=data,
                                    resume=plan or False, progress=not args.no_progress, steps=args.steps)
    except (ResumeMismatch, ResumeRefused, RunLocked) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        close_world(world)
    if world.main:
        print(f"{status['state']}: {status['message']}", file=sys.stderr)
    return 0 if status["state"] in (RunState.COMPLETED, RunState.STOPPED) else 1


if __name__ == "__main__":
    sys.exit(main())
