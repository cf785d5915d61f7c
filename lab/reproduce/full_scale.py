"""The reproduction at the papers' scale: which runs measure which claims, and how each claim is read back.

Three budgets train the full-scale configs (``lab/configs/``) instead of toy models:

- ``gpu``: the papers' settings as the configs write them (MAE ViT-B/16 on ImageNet-100 for 800 epochs, U-ViT-S on
  CIFAR-100 for 500,000 steps, ResNet50(d) on MNIST, CIFAR-10 and ImageNet-1k, the Residual Alignment types on MNIST
  and CIFAR-10);
- ``gpu1``: what fits one GPU overnight at CIFAR/MNIST scale — Table 1 on MNIST and CIFAR-10 with shorter schedules,
  Table 4 with a shorter U-ViT-S schedule, the alignment types for fewer epochs; the MAE claims need ImageNet-100
  and the ``gpu`` budget;
- ``gpu-test``: every run of ``gpu`` shrunk to seconds (tiny widths, one or two epochs, a few steps), for the tests
  of the pipeline on a CPU; it judges nothing.

Each :class:`Experiment` names its claims, the data it needs, the runs it plans (:class:`PlannedRun`: a config,
overrides, the processes ``torchrun`` starts, and the commands run on the finished run folder — a probe, an
alignment analysis, FID) and how its claims are computed from those run folders once they are finished, with the
same verdict engine (:mod:`lab.reproduce.verdict`) as the toy budgets.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lab.reproduce import alignment, decayed, droppath, toy_mae
from lab.reproduce.claims import Claim, Result, mean, mean_sd
from lab.reproduce.verdict import Floor, Target, combine, judge
from lab.runfolder import layout
from lab.runfolder.entries import LIMITS, read_json
from lab.runfolder.layout import Checkpoint
from lab.runs.store import Run

FULL_BUDGETS = ("gpu1", "gpu", "gpu-test")


@dataclass(frozen=True)
class Dataset:
    """A data set a full-scale run reads from a local folder (``--data NAME=DIR``).

    Attributes:
        name: the key of ``--data``.
        what: what ``DIR`` must hold, in words.
        images: training images, for the GPU-hour estimates (None: not a training set).
    """

    name: str
    what: str
    images: int | None


DATASETS = {d.name: d for d in (
    Dataset("imagenet100", "an image folder: DIR/train/<class>/*, DIR/val/<class>/* (ImageNet-100)", 126_689),
    Dataset("imagenet", "an image folder: DIR/train/<class>/*.JPEG, DIR/val/<class>/*.JPEG (ImageNet-1k)", 1_281_167),
    Dataset("cifar10", "the folder holding cifar-10-batches-py (CIFAR-10, Python version)", 50_000),
    Dataset("cifar100", "an image folder of CIFAR-100 exported as PNGs: DIR/train/<class>/*, DIR/val/<class>/*",
            50_000),
    Dataset("mnist", "the folder holding the four MNIST idx files", 60_000),
    Dataset("inception", "a local copy of torch-fidelity's FID Inception weights "
                         "(weights-inception-2015-12-05-6726825d.pth), a file", None),
)}


def needs(*names: str) -> str:
    """What a claim whose data is missing says it needs."""
    return "needs " + " and ".join(f"--data {n}=DIR ({DATASETS[n].what})" for n in names)


@dataclass(frozen=True)
class Step:
    """A command run on a finished training's folder (``python -m lab ARGS``; ``{run}`` is the run folder).

    Attributes:
        args: the command's arguments.
        output: the ``analysis/`` entry it writes: the step is done once it exists.
    """

    args: tuple[str, ...]
    output: str

    def argv(self, run: Path) -> list[str]:
        return [a.replace("{run}", str(run)) for a in self.args]


@dataclass(frozen=True)
class PlannedRun:
    """One training of a full-scale reproduction.

    Attributes:
        key: its name in the plan and its run folder's (``mae-a0.6-s0``).
        config: the packaged config it trains.
        overrides: dotted overrides (the data's root among them).
        data: the ``--data`` names it reads.
        processes: training processes ``torchrun`` starts (one per GPU).
        steps: what runs on its folder once trained.
        images: training images it processes in all (epochs × data set, or steps × global batch), for estimates.
        bench: the throughput record it is estimated from (``model@image size``), None when no bench measures it.
    """

    key: str
    config: str
    overrides: tuple[str, ...]
    data: tuple[str, ...]
    processes: int = 1
    steps: tuple[Step, ...] = ()
    images: float = math.nan
    bench: str | None = None

    def command(self) -> str:
        """The shell line that trains it, as the local executor starts it."""
        head = f"torchrun --nproc_per_node={self.processes} -m lab" if self.processes > 1 else "python -m lab"
        return f"{head} train {shlex.quote(self.config)} " + " ".join(shlex.quote(o) for o in self.overrides)

    def commands(self) -> list[str]:
        """Its training and its steps as shell lines (``RUN``: its folder)."""
        return [self.command(), *("python -m lab " + " ".join(shlex.quote(a.replace("{run}", "RUN")) for a in s.args)
                                  for s in self.steps)]


Runs = dict[str, Run]
"""A plan's finished run folders by key."""


@dataclass(frozen=True)
class Experiment:
    """Claims measured by one set of full-scale runs.

    Attributes:
        paper: key of :data:`~lab.reproduce.claims.PAPERS`.
        claims: what it measures.
        plan: ``(budget, seeds, data) → (runs, why not)``: the runs for the data given, and for each claim it
            cannot measure, why (the data it needs, or the budget that runs it).
        collect: ``(budget, runs by key, planned runs) → results``, from the finished run folders.
    """

    paper: str
    claims: tuple[Claim, ...]
    plan: Callable[[str, int, dict[str, Path]], tuple[list[PlannedRun], dict[str, str]]]
    collect: Callable[[str, Runs, list[PlannedRun]], list[Result]]


# -- reading run folders ------------------------------------------------------------------------------------------

def analysis(run: Run | None, name: str) -> dict:
    """``analysis/<name>`` of a run folder (``{}`` when missing or unreadable)."""
    if run is None:
        return {}
    try:
        value = read_json(run.analysis_path(name), LIMITS["analysis"])
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def number(value: object) -> float:
    """A JSON number as a float (NaN for anything else)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


def test_accuracy(run: Run | None) -> float:
    """The final test accuracy of a classifier's run (NaN when it has none)."""
    metrics = run.read_status().get("metrics") if run is not None else None
    return number(metrics.get("test_acc")) if isinstance(metrics, dict) else math.nan


def seeds_of(planned: list[PlannedRun]) -> list[int]:
    """The seeds of planned runs (their keys end in ``-s<seed>``)."""
    return sorted({int(p.key.rsplit("-s", 1)[1]) for p in planned})


def seed0_commands(planned: list[PlannedRun], prefix: str = "") -> list[str]:
    """The commands of the seed-0 runs whose key starts with ``prefix``."""
    return [line for p in planned if p.key.startswith(prefix) and p.key.endswith("-s0") for line in p.commands()]


def _setting(planned: list[PlannedRun], prefix: str) -> str:
    """The lab's setting: the config and overrides of the first run whose key starts with ``prefix``."""
    first = next((p for p in planned if p.key.startswith(prefix)), None)
    return "" if first is None else f"{first.config} " + " ".join(o for o in first.overrides if "root=" not in o)


# -- Residual Connections Harm Generative Representation Learning: the MAE (Tables 2, 3a, 3b; Figure 6c) -----------

MAE_ALPHAS = {"gpu": (1.0, 0.9, 0.8, 0.7, 0.6, 0.5), "gpu-test": (1.0, 0.8, 0.6)}
MAE_TEST = ("model.embed_dim=32", "model.depth=2", "model.num_heads=2", "model.decoder_embed_dim=32",
            "model.decoder_depth=1", "model.decoder_num_heads=2", "data.image_size=32", "data.workers=0",
            "train.epochs=2", "train.warmup_epochs=1", "train.batch_size=8", "train.probe_every=1",
            "train.rank_inputs=16", "train.log_every=1")
PROBE_TEST = ("--epochs", "2", "--limit", "64", "--batch-size", "32", "--no-progress")
MAE_CLAIMS = (decayed.CLAIMS["mae"], toy_mae.CLAIMS["unet"], toy_mae.CLAIMS["controls"],
              toy_mae.CLAIMS["correlation"])


def _mae_plan(budget: str, seeds: int, data: dict[str, Path]) -> tuple[list[PlannedRun], dict[str, str]]:
    if budget not in MAE_ALPHAS:
        return [], {c.id: "MAE ViT-B/16 on ImageNet-100 (about 200 GPU hours per run) runs at the gpu budget"
                    for c in MAE_CLAIMS}
    if "imagenet100" not in data:
        return [], {c.id: needs("imagenet100") for c in MAE_CLAIMS}
    test = budget == "gpu-test"
    size = MAE_TEST if test else ()
    probe = Step(("probe", "{run}", "--protocol", "authors", *(PROBE_TEST if test else ("--no-progress",))),
                 layout.PROBE)
    arms = [(f"a{a:g}", (f"model.alpha_min={a:g}",)) for a in MAE_ALPHAS[budget]]
    arms += [(s, (f"model.shortcut={s}",)) for s in ("scaled_both", "scaled_branch")]
    arms += [("a0.6-nounet", ("model.alpha_min=0.6", "model.unet_skips=false"))]
    runs = [PlannedRun(f"mae-{arm}-s{seed}", "mae_vit_b16_in100",
                       (f"data.root={data['imagenet100']}", *settings, *size, f"model.seed={seed}",
                        f"train.seed={seed}"), ("imagenet100",), 1 if test else 4, (probe,),
                       800 * DATASETS["imagenet100"].images, None if test else "mae_vit_base_patch16@224")
            for seed in range(seeds) for arm, settings in arms]
    return runs, {}


def _mae_collect(budget: str, runs: Runs, planned: list[PlannedRun]) -> list[Result]:
    from lab.reports.rank_probe import eval_table, rank_probe_correlation  # pandas: not on every command's import

    smoke = budget == "gpu-test"
    seeds = seeds_of(planned)
    alphas = MAE_ALPHAS[budget]

    def probes(arm: str) -> list[float]:
        return [number(analysis(runs.get(f"mae-{arm}-s{s}"), layout.PROBE).get("top1")) for s in seeds]

    base, decayed06 = probes("a1"), probes("a0.6")
    chance = Floor("chance (1/100) + 0.05", 0.01, tuple(base), 0.05)
    setting = _setting(planned, "mae-") + "; probe: lab probe --protocol authors"
    commands = seed0_commands(planned, "mae-")
    gain = [b - a for a, b in zip(base, decayed06, strict=True)]
    claim2, claim3a, claim3b, claim6c = MAE_CLAIMS
    out = [Result(claim2, {f"α_min {a:g}": probes(f"a{a:g}") for a in alphas} | {"gain": gain},
                  f"probe {mean_sd(base)} at α_min 1.0, {mean_sd(decayed06)} at 0.6 (gain {mean_sd(gain)})",
                  decayed.mae_verdict(base, decayed06, smoke, chance=0.01, margin=0.05, paper_setting=True), setting,
                  commands)]
    plain = probes("a0.6-nounet")
    unet = [a - b for a, b in zip(decayed06, plain, strict=True)]
    out.append(Result(claim3a, {"with U-Net skips": decayed06, "without": plain, "gain": unet},
                      f"probe {mean_sd(decayed06)} with U-Net skips, {mean_sd(plain)} without (α_min 0.6)",
                      judge(unet, what="probe accuracy, with U-Net skips minus without",
                            target=Target.accuracy((83.6 - 61.5) / 100, toy_mae.TABLE3["unet"], plain), floor=chance,
                            smoke=smoke), setting, commands))
    both, branch = probes("scaled_both"), probes("scaled_branch")
    parts = [judge([d - c for d, c in zip(decayed06, control, strict=True)], what=f"decayed minus {name}",
                   target=Target.accuracy((83.6 - paper) / 100, toy_mae.TABLE3[key], control), floor=chance,
                   smoke=smoke)
             for name, key, paper, control in (("√0.5 (x + f(x))", "scaled_both", 82.6, both),
                                               ("x + √0.5 f(x)", "scaled_branch", 76.9, branch))]
    out.append(Result(claim3b, {"decayed α_min 0.6": decayed06, "√0.5 (x + f(x))": both, "x + √0.5 f(x)": branch},
                      f"probe {mean_sd(decayed06)} decayed, {mean_sd(both)} √0.5 (x + f(x)), {mean_sd(branch)} "
                      "x + √0.5 f(x)", combine(parts, "above both controls"), setting, commands))
    minus_r = []
    for s in seeds:
        members = [runs[k] for a in alphas if (k := f"mae-a{a:g}-s{s}") in runs]
        table = rank_probe_correlation(eval_table(members))
        minus_r.append(-float(table["r"].iloc[-1]) if len(table) else math.nan)
    out.append(Result(claim6c, {"−r at the last epoch": minus_r},
                      f"Pearson r of Eq. 6 rank against the quick probe across α_min, last epoch: "
                      f"{mean_sd([-v for v in minus_r])}",
                      judge(minus_r, what="−r (rank against probe) across α_min", smoke=smoke), setting, commands))
    return out


# -- the same paper: diffusion (Table 4) ---------------------------------------------------------------------------

UVIT_SIZES = {"gpu": (), "gpu1": ("train.max_steps=50000", "train.save_every=10000", "train.eval_every=10000"),
              "gpu-test": ("model.embed_dim=16", "model.depth=2", "model.num_heads=2", "train.max_steps=6",
                           "train.eval_every=6", "train.warmup_steps=2", "train.samples=4", "train.sample_steps=2",
                           "train.global_batch=0", "train.batch_size=4", "train.save_every=0", "data.workers=0",
                           "train.log_every=1")}
UVIT_STEPS = {"gpu": 500_000, "gpu1": 50_000}
UVIT_CLAIMS = (decayed.CLAIMS["diffusion_fid"], decayed.CLAIMS["diffusion_probe"])
UVIT_ALPHAS = (1.0, 0.8, 0.7, 0.6)
"""Table 4's α_min, every arm zero-initialised as the authors' code; the claims compare 0.7 with 1.0."""
UVIT_PLAIN = "plain"
"""The extra arm: the standard U-ViT (α_min 1.0, no zero-initialisation), reported beside the others."""


def _uvit_plan(budget: str, seeds: int, data: dict[str, Path]) -> tuple[list[PlannedRun], dict[str, str]]:
    if "cifar100" not in data:
        return [], {c.id: needs("cifar100") for c in UVIT_CLAIMS}
    test = budget == "gpu-test"
    steps = [Step(("probe", "{run}", "--protocol", "authors",
                   *(("--noise-levels", "0.1", *PROBE_TEST) if test else ("--no-progress",))), layout.DIFFUSION_PROBE)]
    missing = {}
    if "inception" in data:
        fid = ("--num", "64", "--steps", "2", "--reference-limit", "64") if test else (
            "--select", Checkpoint.BEST, "--sampler", "sde", "--steps", "1000", "--num", "50000")
        steps.append(Step(("fid", "{run}", "--reference", str(data["cifar100"] / "train"), "--inception-weights",
                           str(data["inception"]), *fid, "--no-progress"), layout.FID))
    else:
        missing[UVIT_CLAIMS[0].id] = needs("inception")
    arms = [*((f"a{a:g}", (f"model.alpha_min={a:g}",)) for a in UVIT_ALPHAS),
            (UVIT_PLAIN, ("model.alpha_min=1.0", "model.zero_init=false"))]
    images = UVIT_STEPS.get(budget, 6) * 128
    runs = [PlannedRun(f"uvit-{arm}-s{seed}", "uvit_small_cifar100",
                       (f"data.root={data['cifar100']}", *settings, *UVIT_SIZES[budget], f"model.seed={seed}",
                        f"train.seed={seed}"), ("cifar100",), {"gpu": 8, "gpu1": 1, "gpu-test": 2}[budget],
                       tuple(steps), images, None if test else "uvit_small@32")
            for seed in range(seeds) for arm, settings in arms]
    return runs, missing


def _uvit_collect(budget: str, runs: Runs, planned: list[PlannedRun]) -> list[Result]:
    smoke = budget == "gpu-test"
    seeds = seeds_of(planned)

    def read(arm: str, name: str, key: str) -> list[float]:
        values = []
        for s in seeds:
            record = analysis(runs.get(f"uvit-{arm}-s{s}"), name)
            if name == layout.FID:  # every measurement is kept: the last one is this reproduction's
                record = (record.get("measurements") or [{}])[-1]
            values.append(number(record.get(key)))
        return values

    setting, commands = _setting(planned, "uvit-"), seed0_commands(planned, "uvit-")
    fid_claim, probe_claim = UVIT_CLAIMS
    arms = [*(f"a{a:g}" for a in UVIT_ALPHAS), UVIT_PLAIN]
    names = {arm: "standard U-ViT (α_min 1.0, no zero-init)" if arm == UVIT_PLAIN else f"α_min {arm[1:]}"
             for arm in arms}
    has_fid = any(s.output == layout.FID for p in planned for s in p.steps)
    fids = {arm: read(arm, layout.FID, "value") for arm in arms} if has_fid else {}
    deep = {arm: read(arm, layout.DIFFUSION_PROBE, "deep_top1") for arm in arms}
    pair = {1.0: "a1", 0.7: "a0.7"}
    fid_verdict, probe_verdict = decayed.diffusion_verdicts(
        {a: fids.get(arm, [math.nan] * len(seeds)) for a, arm in pair.items()},
        {a: deep[arm] for a, arm in pair.items()}, smoke, digits_fd=False, paper_setting=budget == "gpu",
        chance=0.01, margin=0.05)
    out = []
    if has_fid:
        out.append(Result(fid_claim, {f"FID, {names[arm]}": v for arm, v in fids.items()},
                          "FID " + ", ".join(f"{mean_sd(v)} at {names[arm]}" for arm, v in fids.items()),
                          fid_verdict, setting, commands))
    out.append(Result(probe_claim, {f"deepest blocks, {names[arm]}": v for arm, v in deep.items()}
                      | {f"best cell, {names[arm]}": read(arm, layout.DIFFUSION_PROBE, "top1") for arm in arms},
                      "deepest-block probe " + ", ".join(f"{mean_sd(v)} at {names[arm]}" for arm, v in deep.items()),
                      probe_verdict, setting, commands))
    return out


# -- ResidualDroppath: Table 1 -------------------------------------------------------------------------------------

TABLE1 = {"mnist": "resnet50_rdp_mnist", "cifar10": "resnet50d_rdp_cifar10", "imagenet": "resnet50d_rdp_in1k"}
TABLE1_ROWS = {"mnist": ("mnist", "ResNet50"), "cifar10": ("cifar10", "ResNet50d"),
               "imagenet": ("imagenet", "ResNet50d")}
"""The paper's row (:data:`lab.reproduce.droppath.TABLE1_ROWS`) of the model each config trains."""
TABLE1_SEEDS = 5
"""Table 1's seeds, as the paper's (MNIST and CIFAR-10; ImageNet-1k had one, the lab keeps five)."""
TABLE1_EPOCHS = {"gpu": {"mnist": 100, "cifar10": 200, "imagenet": 300}, "gpu1": {"mnist": 5, "cifar10": 15}}
TABLE1_TEST = ("train.epochs=1", "train.warmup_epochs=0", "train.warmup_steps=1", "train.batch_size=8",
               "data.workers=0", "train.log_every=1")
TABLE1_PROCESSES = {"gpu": {"mnist": 1, "cifar10": 1, "imagenet": 4}, "gpu1": {"mnist": 1, "cifar10": 1},
                    "gpu-test": {"mnist": 2, "cifar10": 2, "imagenet": 2}}


def _table1_plan(budget: str, seeds: int, data: dict[str, Path]) -> tuple[list[PlannedRun], dict[str, str]]:
    sets = [d for d in TABLE1 if d in TABLE1_PROCESSES[budget] and d in data]
    if not sets:
        return [], {droppath.CLAIMS["table1"].id: needs(*TABLE1_PROCESSES[budget]).replace(" and ", " or ")}
    test = budget == "gpu-test"
    seeds = seeds if test else max(seeds, TABLE1_SEEDS)
    runs = []
    for name in sets:
        size = TABLE1_TEST if test else (f"train.epochs={TABLE1_EPOCHS[budget][name]}",)
        for seed in range(seeds):
            for mode in droppath.MODES.values():
                runs.append(PlannedRun(
                    f"table1-{name}-{mode}-s{seed}", TABLE1[name],
                    (f"data.root={data[name]}", f"train.droppath={mode}",
                     f"train.drop_path_rate={0.1 if mode != 'off' else 0.0}", *size,
                     f"model.seed={seed}", f"train.seed={seed}"), (name,), TABLE1_PROCESSES[budget][name],
                    images=(1 if test else TABLE1_EPOCHS[budget][name]) * DATASETS[name].images,
                    bench=None))
    return runs, {}


def _table1_collect(budget: str, runs: Runs, planned: list[PlannedRun]) -> list[Result]:
    claim = droppath.CLAIMS["table1"]
    seeds = seeds_of(planned)
    sets = [d for d in TABLE1 if any(p.key.startswith(f"table1-{d}-") for p in planned)]
    acc = {name: {label: [test_accuracy(runs.get(f"table1-{name}-{mode}-s{s}")) for s in seeds]
                  for label, mode in droppath.MODES.items()} for name in sets}
    texts = [f"{name}: " + ", ".join(f"{label} {mean_sd(v, 4)}" for label, v in arms.items())
             for name, arms in acc.items()]
    values = {f"{name} {label}": v for name, arms in acc.items() for label, v in arms.items()}
    verdict = droppath.table1_verdict(acc, {name: TABLE1_ROWS[name] for name in sets}, budget == "gpu-test",
                                      paper_setting=budget == "gpu")
    return [Result(claim, values, "; ".join([*texts, droppath.highest_mean(acc)]), verdict,
                   _setting(planned, "table1-"), seed0_commands(planned, "table1-"))]


# -- Residual Alignment: RA1–RA4 and neural collapse ---------------------------------------------------------------

RA = {"fc": ("ra_type1", "mnist"), "conv": ("ra_type3", "cifar10")}
RA_EPOCHS = {"gpu": 500, "gpu1": 50}
RA_TRAINED = {"mnist": alignment.TRAINED, "cifar10": 0.8}
"""The test accuracy each arm must reach at full scale (:data:`lab.reproduce.alignment.TRAINED`): deep conv nets without
skips sit near 0.87–0.90 on CIFAR-10 once trained, so 0.8 there tells a trained net from one mid-training."""
RA_TEST = ("model.width=16", "model.depth=4", "train.epochs=1", "train.batch_size=16")
RA_TEST_CONV = ("model.channels=[4,8]", "model.depths=[2,2]", "train.epochs=1", "train.batch_size=16")


def _ra_plan(kind: str) -> Callable[[str, int, dict[str, Path]], tuple[list[PlannedRun], dict[str, str]]]:
    config, dataset = RA[kind]

    def plan(budget: str, seeds: int, data: dict[str, Path]) -> tuple[list[PlannedRun], dict[str, str]]:
        if dataset not in data:
            return [], {c.id: needs(dataset) for c in _ra_claims(kind)}
        test = budget == "gpu-test"
        size = (RA_TEST if kind == "fc" else RA_TEST_CONV) if test else (f"train.epochs={RA_EPOCHS[budget]}",)
        analyze = Step(("analyze", "alignment", "{run}", *(("--inputs", "8", "--nc-inputs", "32") if test else ())),
                       layout.ALIGNMENT)
        return [PlannedRun(f"ra-{kind}-{shortcut}-s{seed}", config,
                           (f"data.root={data[dataset]}", f"model.shortcut={shortcut}", *size, f"model.seed={seed}",
                            f"train.seed={seed}"), (dataset,), 1, (analyze,),
                           (1 if test else RA_EPOCHS[budget]) * DATASETS[dataset].images)
                for seed in range(seeds) for shortcut in ("identity", "none")], {}

    return plan


def _ra_claims(kind: str) -> tuple[Claim, ...]:
    """RA1–RA4 of ``kind``: Figure 7 is followed on its own runs (:func:`_nc_plan`)."""
    return tuple(c for c in alignment.claims_of(kind) if not c.id.startswith(NC_CLAIM_PREFIX))


def _ra_collect(kind: str) -> Callable[[str, Runs, list[PlannedRun]], list[Result]]:
    def collect(budget: str, runs: Runs, planned: list[PlannedRun]) -> list[Result]:
        seeds = seeds_of(planned)
        reports, accuracy = {}, {}
        for shortcut in ("identity", "none"):
            folders = [runs.get(f"ra-{kind}-{shortcut}-s{s}") for s in seeds]
            reports[shortcut] = [analysis(r, layout.ALIGNMENT) for r in folders]
            accuracy[shortcut] = [test_accuracy(r) for r in folders]
        return alignment.judged(kind, reports, None, accuracy, _setting(planned, f"ra-{kind}-"),
                                seed0_commands(planned, f"ra-{kind}-"), 0.0, budget == "gpu-test",
                                trained=RA_TRAINED[RA[kind][1]])

    return collect


# -- the same paper: neural collapse over training (Figure 7) -------------------------------------------------------

NC_CLAIM_PREFIX = "alignment.nc."
NC_CLAIM = next(c for c in alignment.claims_of("fc") if c.id.startswith(NC_CLAIM_PREFIX))
NC_EPOCHS = {"gpu": 350, "gpu1": 50}
"""Figure 7's run: the paper's Type 4a on MNIST for 350 epochs (gpu1: shorter)."""
NC_KEPT = 10
"""Checkpoints kept over the run (``train.save_every``), at which ``lab analyze collapse`` measures NC."""
MNIST_STEPS = math.ceil(60_000 / 128)
"""Steps per epoch of the Type 4a config on MNIST (batch 128)."""


def _nc_plan(budget: str, seeds: int, data: dict[str, Path]) -> tuple[list[PlannedRun], dict[str, str]]:
    if "mnist" not in data:
        return [], {NC_CLAIM.id: needs("mnist")}
    test = budget == "gpu-test"
    epochs = 1 if test else NC_EPOCHS[budget]
    keep = (f"train.save_every={max(1, epochs * MNIST_STEPS // NC_KEPT)}",) if not test else (
        "model.width=16", "train.epochs=1", "train.batch_size=16", "train.max_steps=6", "train.save_every=2")
    small = ("--inputs", "8", "--nc-inputs", "32") if test else ()
    steps = (Step(("analyze", "collapse", "{run}", *small[2:]), layout.COLLAPSE),
             Step(("analyze", "alignment", "{run}", *small), layout.ALIGNMENT))
    return [PlannedRun(f"nc-type4a-s{seed}", "ra_type4",
                       (f"data.root={data['mnist']}", f"train.epochs={epochs}", *keep, f"model.seed={seed}",
                        f"train.seed={seed}"), ("mnist",), 1, steps, epochs * DATASETS["mnist"].images)
            for seed in range(seeds)], {}


def _nc_collect(budget: str, runs: Runs, planned: list[PlannedRun]) -> list[Result]:
    folders = [runs.get(f"nc-type4a-s{s}") for s in seeds_of(planned)]
    curves = {"identity": [[(int(point.get("step") or 0), {k: number(v) for k, v in point.items() if k != "step"})
                            for point in analysis(r, layout.COLLAPSE).get("curve") or []] for r in folders]}
    reports = [analysis(r, layout.ALIGNMENT) for r in folders]
    accuracy = [test_accuracy(r) for r in folders]
    learned = [] if mean(accuracy) >= alignment.LEARNED else \
        [f"the network reached {mean_sd(accuracy)} test accuracy, not {alignment.LEARNED:g}"]
    return [alignment.nc_result(NC_CLAIM, curves, alignment.report_values(reports, "align_offdiag"),
                                alignment.report_values(reports, "baseline_mean"), learned, budget == "gpu-test",
                                _setting(planned, "nc-"), seed0_commands(planned, "nc-"), 0.0,
                                {"test accuracy": accuracy})]


EXPERIMENTS = (
    Experiment("alignment", _ra_claims("fc"), _ra_plan("fc"), _ra_collect("fc")),
    Experiment("alignment", _ra_claims("conv"), _ra_plan("conv"), _ra_collect("conv")),
    Experiment("alignment", (NC_CLAIM,), _nc_plan, _nc_collect),
    Experiment("decayed", MAE_CLAIMS, _mae_plan, _mae_collect),
    Experiment("decayed", UVIT_CLAIMS, _uvit_plan, _uvit_collect),
    Experiment("droppath", (droppath.CLAIMS["table1"],), _table1_plan, _table1_collect),
)
"""Every full-scale experiment, in report order."""
TOY_ONLY = {decayed.CLAIMS["rank"].id: "Figure 9's ResNet-18 runs on an ImageNet subset have no config here; the cpu "
                                        "budget measures the claim on residual MLPs",
            droppath.CLAIMS["figure3"].id: "the paper's Figure 3 is the 32 × 32 MLP on the spiral, which the cpu "
                                           "budget trains in full",
            f"{NC_CLAIM_PREFIX}conv": "Figure 7 follows the fully-connected Type 4a on MNIST (alignment.nc.fc at "
                                      "this budget); the cpu budget also follows the convolutional toy ResNet"}
"""Claims the full-scale budgets leave to the cpu budget, and why."""

