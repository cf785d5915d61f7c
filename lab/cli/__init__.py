"""Command line: ``python -m lab train CONFIG [section.key=value ...] [--runs-dir DIR]``, ``resume RUN``,
``analyze alignment|collapse|retransformation|rank RUN [--inputs N] [--k K]``, ``probe RUN [--layer bottleneck|blocks.N]
[--epochs N]`` (linear probing on frozen features), ``sample RUN`` and ``fid RUN --reference DIR|digits``
(diffusion runs), ``sweep CONFIG key=v1,v2,… [section.key=value …]``, ``submit CONFIG [...] --executor
slurm|local`` (a sweep as cluster jobs), ``reproduce`` and ``serve`` (the lab's pages, as ``panel serve apps/``
serves them from a checkout).

``train`` and ``resume`` also run as the processes of ``torchrun --nproc_per_node=N -m lab train CONFIG``
(data-parallel, the loader engine); ``--steps N`` trains a slice of a run and stops with a checkpoint.

This module is the parser: every command is declared here with its options (those several commands share in
:mod:`lab.cli.options`), and each command runs in a module of its own, ``lab.cli.<command>``, whose ``run(args)``
(or ``run(args, store)`` for the commands on a runs folder) returns the exit status. Only the command given is
imported, and only its options are built (some name choices that live in what they run, such as the papers of
``reproduce``): ``lab train`` does not load the reproductions, the reports or submitit.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from importlib import import_module

from lab.cli.options import (
    add_cluster,
    add_device,
    add_network_source,
    add_no_progress,
    add_runs_dir,
    add_sampling,
    add_training,
    seed,
)
from lab.extras import missing_extra
from lab.runfolder.layout import Checkpoint


def _train(train: argparse.ArgumentParser) -> None:
    add_no_progress(train)
    train.add_argument("config", help="YAML config, e.g. configs/spiral.yaml")
    train.add_argument("overrides", nargs="*", help="dotted overrides such as model.depth=16 train.lr=0.01")
    where = train.add_mutually_exclusive_group()
    where.add_argument("--runs-dir", default=None, help="runs folder (default: $LAB_RUNS_DIR or ./runs)")
    where.add_argument("--run-dir", default=None, help="write into this existing run folder instead")
    train.add_argument("--name", default=None, help="run name (default: the config's name)")
    add_training(train)


def _resume(resume: argparse.ArgumentParser) -> None:
    from lab.train.resume import RESUME_KEYS

    add_runs_dir(resume)
    add_no_progress(resume)
    resume.add_argument("run", help="run id (in the runs folder) or the path of a run folder")
    resume.add_argument("overrides", nargs="*", help="settings to change from here on (recorded in config.json), "
                                                    f"e.g. train.lr=0.001; allowed: {', '.join(RESUME_KEYS)}")
    source = resume.add_mutually_exclusive_group()
    source.add_argument("--checkpoint", default=Checkpoint.LAST, choices=list(Checkpoint),
                        help="continue from last.pt (default) or best.pt")
    source.add_argument("--restart", action="store_true",
                        help="train again from step 0 with the run's config; the earlier attempt moves to history/")
    add_training(resume)


def _analyze(analyze: argparse.ArgumentParser) -> None:
    from lab.analysis.residual_alignment import RA4_FIT_START

    for add in (add_runs_dir, add_device, add_no_progress, add_network_source):
        add(analyze)
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


def _probe(probe: argparse.ArgumentParser) -> None:
    for add in (add_runs_dir, add_device, add_no_progress, add_network_source):
        add(probe)
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


def _sample(sample: argparse.ArgumentParser) -> None:
    from lab.nn.diffusion import SAMPLERS

    for add in (add_runs_dir, add_device, add_no_progress):
        add(sample)
    sample.add_argument("run", help="run id (in the runs folder) or a run folder's path")
    sample.add_argument("--num", type=int, default=64, help="how many samples (default 64)")
    sample.add_argument("--steps", type=int, default=50, help="sampler steps (default 50)")
    sample.add_argument("--sampler", default=None, choices=SAMPLERS,
                        help="default: the run's train.sampler. On the VP-SDE ode: probability flow, Euler (the "
                             "reference's training grids); sde: Euler-Maruyama (its FID samples, with --steps 1000). "
                             "On the discrete schedule dpm_solver: DPM-Solver++")
    add_sampling(sample)


def _fid(fid: argparse.ArgumentParser) -> None:
    from lab.nn.diffusion import SAMPLERS

    for add in (add_runs_dir, add_device, add_no_progress):
        add(fid)
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
    add_sampling(fid)


def _sweep(sweep: argparse.ArgumentParser) -> None:
    add_runs_dir(sweep)
    add_no_progress(sweep)
    sweep.add_argument("config", help="YAML config of a residual_mlp, e.g. configs/spiral.yaml")
    sweep.add_argument("overrides", nargs="*", help="dotted overrides; a comma list is swept, e.g. "
                                                   "model.alpha_min=1.0,0.8,0.6,0.5 train.seed=0,1")


def _submit(submit: argparse.ArgumentParser) -> None:
    from lab.jobs.submit import EXECUTORS

    add_runs_dir(submit)
    submit.add_argument("config", help="YAML config of any model, e.g. configs/mae_vit_base_in1k.yaml")
    submit.add_argument("overrides", nargs="*", help="dotted overrides; a comma list is swept, e.g. "
                                                    "model.alpha_min=1.0,0.7 train.seed=0,1,2")
    submit.add_argument("--executor", default="slurm", choices=list(EXECUTORS),
                        help="slurm (sbatch; default) or local (submitit's local executor, on this machine)")
    submit.add_argument("--nodes", type=int, default=1, help="nodes per member (default 1)")
    submit.add_argument("--gpus-per-node", type=int, default=0, help="GPUs per node (default 0: CPUs)")
    submit.add_argument("--tasks-per-node", type=int, default=None,
                        help="training processes per node (default: one per GPU, one without GPUs)")
    add_cluster(submit)
    submit.add_argument("--array-parallelism", type=int, default=64, metavar="K",
                        help="at most K members run at once (default 64)")
    waiting = submit.add_mutually_exclusive_group()
    waiting.add_argument("--wait", dest="wait", action="store_true", default=None,
                         help="wait for every job and report each member (default with --executor local)")
    waiting.add_argument("--no-wait", dest="wait", action="store_false", help="return once submitted (default with "
                                                                              "--executor slurm)")


def _latents(latents: argparse.ArgumentParser) -> None:
    add_device(latents)
    add_no_progress(latents)
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
    latents.add_argument("--seed", type=seed, default=0, help="seeds that split (default 0)")
    latents.add_argument("--batch-size", type=int, default=32, help="images encoded at once (default 32)")


def _reproduce(reproduce: argparse.ArgumentParser) -> None:
    from lab.reproduce import BUDGETS, PAPERS
    from lab.reproduce.full_scale import DATASETS
    from lab.reproduce.launch import EXECUTORS

    add_runs_dir(reproduce)
    add_no_progress(reproduce)
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
    scale.add_argument("--executor", default="local", choices=list(EXECUTORS),
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
    add_cluster(scale)


def _serve(serve: argparse.ArgumentParser) -> None:
    add_runs_dir(serve)
    serve.add_argument("--port", type=int, default=5006, help="port (default 5006; 0: a free one)")
    serve.add_argument("--address", default="127.0.0.1", help="interface to listen on (default: loopback only)")
    serve.add_argument("--max-jobs", type=int, default=2, help="training jobs at once (default 2)")
    serve.add_argument("--threads", action="store_true", help="train the pages' runs in the server's threads "
                                                             "instead of child processes")
    serve.add_argument("--show", action="store_true", help="open a browser tab")


def _throughput(throughput: argparse.ArgumentParser) -> None:
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


COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "train": ("train a config into a new run folder", _train),
    "resume": ("continue a run from its last checkpoint (or --checkpoint best, or --restart); what it sets aside is "
               "kept under <run>/history/", _resume),
    "analyze": ("analyse a run's checkpoint into <run>/analysis/ (or a network of your own: --model and --weights, "
                "imported as a run first)", _analyze),
    "probe": ("linear probe on a run's frozen features into <run>/analysis/probe.json (a diffusion run's: "
              "analysis/diffusion_probe.json)", _probe),
    "sample": ("draw images from a diffusion run into <run>/analysis/samples-*.png and .npz", _sample),
    "fid": ("Fréchet distance of a diffusion run's samples from reference images (FID, or digits-FD) appended to "
            "<run>/analysis/fid.json", _fid),
    "sweep": ("train a sweep (comma lists; two lists sweep their product) into one folder of ordinary run folders, "
              "as few ensembles as possible", _sweep),
    "submit": ("send a sweep (comma lists) or one run to a SLURM cluster, one job per member writing into one sweep "
               "folder; --executor local runs the jobs here", _submit),
    "latents": ("encode an image folder with a local VAE into a latent folder (data.name=latent_folder); under "
                "torchrun each process encodes its share", _latents),
    "reproduce": ("measure the papers' claims and write OUT/report.html, report.md and claims.json", _reproduce),
    "serve": ("serve the lab's pages at http://127.0.0.1:PORT/apps (as `panel serve apps/` does from a checkout) "
              "until Ctrl-C", _serve),
    "throughput": ("images per second of the MAE or the U-ViT's training step on this device; --record FILE feeds "
                   "`reproduce --dry-run`'s GPU-hours", _throughput),
}
"""Each command's one-line help and the function that adds its options to its parser."""
FOLDERLESS = frozenset({"latents", "serve", "throughput"})
"""Commands that open no runs folder: their ``run`` takes the arguments alone."""


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser, every command listed, with the options of ``command`` (None: of none).

    Args:
        command: the command whose options are built; another command given to the parser then parses as if it
            took none.
    """
    top = argparse.ArgumentParser(prog="python -m lab", description="Residual Lab experiments.")
    sub = top.add_subparsers(dest="command", required=True)
    for name, (help_, arguments) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_)
        if name == command:
            arguments(command_parser)
    return top


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The arguments; ``key=value`` overrides may also follow options (``resume RUN --checkpoint best train.lr=1e-3``),
    which argparse alone would refuse once the positionals are taken."""
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)  # the first word: the parser has no options
    top = parser(command)
    args, extra = top.parse_known_args(argv)
    late = [a for a in extra if "=" in a and not a.startswith("-")] if hasattr(args, "overrides") else []
    if len(late) < len(extra):
        top.error(f"unrecognized arguments: {' '.join(a for a in extra if a not in late)}")
    args.overrides = [*getattr(args, "overrides", []), *late]
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 completed or stopped, 1 diverged or failed, 2 bad input or a refused
    resume, with nothing written; a sweep counts as :func:`lab.cli.sweep.run` says)."""
    args = parse(argv)
    try:
        command = import_module(f"lab.cli.{args.command}")
        if args.command in FOLDERLESS:
            return command.run(args)
        from lab.runs.store import RunStore, default_runs_dir  # here: --help reads no run folder

        return command.run(args, RunStore(args.runs_dir or default_runs_dir()))
    except ImportError as err:  # a command that needs an extra not installed (the pages: [ui]) says which
        missing = missing_extra(err)
        if missing is None:
            raise
        print(f"error: {missing}", file=sys.stderr)
        return 2
