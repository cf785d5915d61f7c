"""*Residual Alignment: Uncovering the Mechanisms of Residual Networks*, reproduced on scikit-learn's digits.

One experiment per model type — the fully-connected ResNet (Type 4, 8 post-activation blocks) and a convolutional
one (8 basic blocks in one stage) — trained with and without skip connections for each seed (the two arms share
the seed, so every effect is a paired difference), then analysed as ``python -m lab analyze alignment`` does
(:func:`lab.reports.alignment.alignment_report`: K = 30, RA4 fitted from block 5, over the 8 blocks after it).
Neural collapse is also followed over training: NC1–NC4 of the last layer's features on fixed training inputs at
initialisation and after every epoch (:class:`CollapseOverTraining`), as the paper's Figure 7 follows them over 350
epochs.

The claims, each in the paper's direction: RA1 straighter and more equally spaced trajectories with skips than
without; RA2 alignment above the random baseline and above the network without skips; RA3 (stated for
fully-connected ResNets, so measured on the FC one only) a sharper drop of the spectrum after the top C singular
values with skips; RA4 1/σ₁ rising with depth (slope > 0), linear (mean R² above 0.8 over at least 5 fitted blocks)
and more linear than without skips, with the exponent b of σ₁ ∝ i^b compared with the paper's 1/i (b = −1,
:func:`ra4_exponent`); Figure 7 NC1–NC4 falling over training (the last value against the network's at
initialisation, on the paper's log scale) in the network with skips where it shows RA2; the skip/no-skip contrast of
NC is reported, not judged.

Every claim compares trained networks: each arm's mean test accuracy must reach :data:`TRAINED`, else every row of
that model type is not measurable and says which arm fell short. A deep network without skips trains more slowly and
less stably than one with them; where the cpu budget's recipe leaves it short, the arm without skips gets its own
recipe (:data:`PLAIN_RECIPE`), only as far as it needs to train, and every row says so beside both arms' test
accuracies.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import torch

from lab.analysis.residual_alignment import collapse_of
from lab.reports.alignment import alignment_report
from lab.reproduce.claims import Claim, Curves, Result, mean, mean_sd
from lab.reproduce.runs import command, config, train
from lab.reproduce.verdict import JUDGED, Floor, Verdict, combine, judge, t_test
from lab.runs.store import RunStore
from lab.train.build import build_data
from lab.train.core import Callback, TrainerView

P = "alignment"
PAPER_SCALE = ("ResNet34-sized Types 1–5 (16 blocks, D = 512 or 64–128 channels) on MNIST, FashionMNIST, CIFAR-10/100 "
               "and ImageNette, 500 epochs of SGD")
CLAIMS = {
    "ra1": Claim("alignment.ra1", P, "Figure 1", "RA1: intermediate representations of an input lie on a line "
                 "through the blocks, equally spaced", "qualitative (trajectories on two random directions)",
                 "straightness of h_0 … h_L (1 = a line) and the coefficient of variation of its step lengths "
                 "(0 = equally spaced), with skips against without", PAPER_SCALE),
    "ra2": Claim("alignment.ra2", P, "Figure 2", "RA2: the top singular vectors of the residual Jacobians align "
                 "across blocks; RA does not occur without skip connections",
                 "diagonal U_jᵀ J_i V_j for all block pairs (K = 30)",
                 "mean alignment score over block pairs i ≠ j, above Haar-random bases and above the network without "
                 "skips", PAPER_SCALE),
    "ra3": Claim("alignment.ra3", P, "Figure 4a", "RA3: residual Jacobians of fully-connected ResNets have rank at "
                 "most about the number of classes C", "the top-C singular values noticeably surpass the next ones",
                 "log of (mean top-C σ / mean next-C σ), with skips minus without", PAPER_SCALE),
    "ra4": Claim("alignment.ra4", P, "Figure 4b", "RA4: the top singular value of block i scales as 1/i after RA "
                 "begins", "1/σ₁ linear in depth post block 5, slope 0.992: σ₁ close to 1/i",
                 "judged: the least-squares slope of 1/σ₁ against the block index from block 5 (with skips) above 0, "
                 "and its R² above the network without skips, with a mean R² above 0.8 over at least 5 fitted "
                 "blocks as the floor; compared with the paper's 1/i, not judged: the exponent b of σ₁ ∝ i^b over the "
                 "same blocks (log-log least squares; −1 for 1/i), its 95% interval against −1 (the raw slope 0.992 "
                 "is in the paper's ResNet34's scale of σ₁)",
                 PAPER_SCALE),
    "nc": Claim("alignment.nc", P, "Figure 7", "neural collapse emerges over training in networks that show residual "
                "alignment", "NC1–NC4 fall over 350 epochs (Type 4a on MNIST) while RA emerges",
                "per seed, log10 of NC1, NC2 (equinorm and maximal equiangularity of the class means), NC3 and NC4 "
                "of the last layer at initialisation minus at the end of training, in the network with skips, where "
                "it shows RA2 (its alignment above the random bases); the network without skips reported beside it, "
                "not judged", PAPER_SCALE),
}
SIZES = {  # per budget: training epochs, analysed inputs (FC, conv), FC width and depth, conv channels and blocks
    "smoke": {"epochs": 2, "inputs": 12, "conv_inputs": 12, "width": 24, "depth": 6, "channels": 4, "blocks": 6,
              "nc_inputs": 100},
    "cpu": {"epochs": 30, "inputs": 64, "conv_inputs": 32, "width": 128, "depth": 12, "channels": 8, "blocks": 12,
            "nc_inputs": 500},
}
"""The conv net's Jacobians (512 × 512 at 8 channels of 8 × 8) cost most of its analysis, which grows with the
inputs: 32 of them halve it (about 7 s instead of 13 s a run on two shared cores) and move every number the claims
read by far less than the seeds do (over five cpu runs, with and without skips: alignment within 0.001, R² of the
1/σ₁ line within 0.02, straightness within 0.007, the exponent of σ₁ within 0.02, while it varies by 0.4 across
seeds)."""
LEARNED = 0.5
"""The test accuracy a network must reach (ten digits: chance is 0.1) for its neural collapse to mean anything (the
full-scale Figure 7 run)."""
TRAINED = 0.9
"""The mean test accuracy each arm, with skips and without, must reach for RA1–RA4 and NC to compare trained networks.

The paper analyses networks trained to convergence (500 epochs), with and without skips; its no-skip nets classify
well, so the contrast is one of architecture, not of training progress. On digits a trained toy ResNet reaches 0.95 to
0.98; a net at 0.6 is mid-training, and its Jacobians describe an optimisation in progress (the conv net without skips
at the cpu budget's first recipe read 0.41 to 0.83 over three seeds, while its twin with skips read 0.98). 0.9 is
within a few points of what both arms reach once trained, and far above any arm that has not."""
PLAIN_RECIPE: dict[str, tuple[tuple[str, ...], str]] = {
    "fc": ((), ""),
    "conv": (("train.weight_decay=0.001", "train.epochs=60"), "weight decay 0.001 instead of 0.01, 60 epochs"),
}
"""Per model type, the overrides of the network without skips beyond the shared recipe, and the same in words: only what
it needs to reach :data:`TRAINED` at the cpu budget. The conv net without skips (25 layers of 8 channels, every
parameter decayed as the paper's Eq. 1 says) underfits with the shared λ = 0.01: after 30 epochs its training
accuracy is as low as its test accuracy (0.4 to 0.8) and its loss spikes. A lower learning rate (0.02, 0.01) or a
warmup trains it no better; λ = 0.001 does, but slowly (0.86 to 0.95 after 30 epochs); with λ = 0.001 and 60 epochs
it reaches 0.95 to 0.97 (five seeds). Its architecture, BatchNorm included (the paper's no-skip nets keep it), is its
twin's. The FC net without skips trains with the shared recipe."""
NC_FIGURE7 = {"nc1": "NC1", "nc2_equinorm": "NC2 equinorm", "nc2_maxangle": "NC2 max-angle", "nc3": "NC3",
              "nc4": "NC4"}
"""The neural-collapse measures Figure 7 follows over training (:mod:`lab.analysis.collapse`), judged one by one."""
RA4_R2, RA4_BLOCKS = 0.8, 5
"""RA4's floor: a mean R² above this, over at least this many fitted blocks."""


class CollapseOverTraining(Callback):
    """NC1–NC4 of the last layer (its pooled features, the head as classifier) on fixed inputs at initialisation and
    after every evaluation.

    Attributes:
        curve: ``(step, {NC key: value})`` per evaluation, the keys of
            :data:`~lab.analysis.residual_alignment.NC_KEYS`.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y, self.curve = x, y, []

    def on_train_start(self, trainer: TrainerView) -> None:
        if not self.curve:  # the network at initialisation: where Figure 7's curves start
            self.on_eval_end(trainer, {})

    @torch.no_grad()
    def on_eval_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        model = trainer.model
        nc = collapse_of(model, self.x.to(next(model.parameters()).device), self.y)
        self.curve.append((trainer.step, {key: float(v[-1]) for key, v in nc.items()}))


def _model_overrides(kind: str, sizes: dict) -> list[str]:
    if kind == "fc":
        return [f"model.depth={sizes['depth']}", f"model.width={sizes['width']}"]
    return [f"model.depths=[{sizes['blocks']}]", f"model.channels=[{sizes['channels']}]"]


def scale(kind: str, budget: str) -> str:
    """The lab's setting of the experiment on ``kind`` at ``budget``."""
    s = SIZES[budget]
    model = (f"FC ResNet of {s['depth']} blocks × {s['width']}" if kind == "fc"
             else f"conv ResNet of {s['blocks']} blocks × {s['channels']} channels")
    words = plain_recipe(kind, budget)[1]
    return (f"{model}, scikit-learn digits (1,347 training images of 8 × 8), {s['epochs']} epochs of SGD"
            + (f"; without skips {words}" if words else ""))


def plain_recipe(kind: str, budget: str) -> tuple[tuple[str, ...], str]:
    """The overrides of the network without skips beyond the shared recipe at ``budget``, and the same in words
    (:data:`PLAIN_RECIPE`; the smoke budget, which judges nothing, shares one recipe)."""
    return ((), "") if budget == "smoke" else PLAIN_RECIPE[kind]


def report_values(reports: list[dict], key: str) -> list[float]:
    """``key`` of each alignment report (None as NaN)."""
    return [math.nan if r.get(key) is None else float(r[key]) for r in reports]


def _diff(with_: list[float], without: list[float]) -> list[float]:
    """Paired differences by seed."""
    return [a - b for a, b in zip(with_, without, strict=True)]


def _train_pairs(kind: str, budget: str, seeds: int, store: RunStore, tick: Callable[[], None]
                 ) -> tuple[dict[str, list[dict]], dict[str, list[Curve]], dict[str, list[float]],
                            list[str]]:
    """Train the network with skips (``identity``) and without (``none``, with :func:`plain_recipe`'s overrides) for
    every seed, and analyse each: per shortcut, the alignment reports, the NC1 curves over training and the test
    accuracies; and the commands that do the same (seed 0's)."""
    sizes = SIZES[budget]
    inputs = sizes["conv_inputs" if kind == "conv" else "inputs"]
    reports: dict[str, list[dict]] = {"identity": [], "none": []}
    curves: dict[str, list[Curve]] = {"identity": [], "none": []}
    accuracy: dict[str, list[float]] = {"identity": [], "none": []}
    commands: list[str] = []
    for seed in range(seeds):
        for shortcut in reports:
            overrides = [*_model_overrides(kind, sizes), f"model.shortcut={shortcut}", f"model.seed={seed}",
                         f"train.seed={seed}", f"train.epochs={sizes['epochs']}",
                         *(plain_recipe(kind, budget)[0] if shortcut == "none" else ())]
            base = f"ra_{kind}_digits"  # configs/ra_fc_digits.yaml, configs/ra_conv_digits.yaml
            data = build_data(config(base, overrides))
            n = sizes["nc_inputs"]
            collapse = CollapseOverTraining(data.x_train[:n], data.y_train[:n])
            run, line = train(base, overrides, store, f"ra-{kind}-{shortcut}-s{seed}",
                              callbacks=[collapse], data=data)
            reports[shortcut].append(alignment_report(run, inputs=inputs, nc_inputs=sizes["nc_inputs"]))
            curves[shortcut].append(collapse.curve)
            accuracy[shortcut].append(float(run.read_status()["metrics"]["test_acc"]))
            analyze = command("analyze", "alignment", run.id, "--inputs", str(inputs), "--nc-inputs",
                              str(sizes["nc_inputs"]))
            if seed == 0:
                commands += [line, analyze]
            tick()
    return reports, curves, accuracy, commands


def measure(kind: str, budget: str, seeds: int, store: RunStore,
            tick: Callable[[], None] = lambda: None) -> list[Result]:
    """The claims of :func:`claims_of` for one model type (``fc`` or ``conv``) at ``budget``.

    Args:
        kind: ``fc`` (Type 4) or ``conv``.
        budget: ``smoke`` or ``cpu``.
        seeds: model and batch-order seeds 0 … seeds − 1 (the data split is fixed).
        store: where the runs are written.
        tick: called after each training and analysis (progress).
    """
    start = time.perf_counter()
    reports, curves, accuracy, commands = _train_pairs(kind, budget, seeds, store, tick)
    return judged(kind, reports, curves, accuracy, scale(kind, budget), commands, time.perf_counter() - start,
                  budget == "smoke", recipe=plain_recipe(kind, budget)[1])


Curve = list[tuple[int, dict[str, float]]]
"""NC of the last layer over training: ``(step, {NC key: value})`` per evaluation (or kept checkpoint)."""


def judged(kind: str, reports: dict[str, list[dict]], curves: dict[str, list[Curve]] | None,
           accuracy: dict[str, list[float]], setting: str, commands: list[str], seconds: float, smoke: bool, *,
           trained: float = TRAINED, recipe: str = "") -> list[Result]:
    """The claims of :func:`claims_of` for ``kind`` from the analysed pairs, whatever their scale.

    Args:
        kind: ``fc`` or ``conv``.
        reports: per shortcut (``identity``, ``none``), one alignment report per seed (``analysis/alignment.json``).
        curves: per shortcut, per seed, NC of the last layer over training (:data:`Curve`); None: Figure 7 is not
            judged from these runs (the full-scale budgets follow it on its own runs, :func:`nc_result`).
        accuracy: per shortcut, per seed, the final test accuracy.
        setting: the lab's setting, in words.
        commands: the commands that reproduce it.
        seconds: what the trainings took.
        smoke: judge nothing (a pipeline check).
        trained: the mean test accuracy each arm must reach (:data:`TRAINED`), else every claim is not measurable.
        recipe: how the network without skips was trained apart from its twin, in words (:data:`PLAIN_RECIPE`;
            empty: the same recipe).
    """
    tag = "FC" if kind == "fc" else "conv"
    claims = {c.id.split(".")[1]: c for c in claims_of(kind)}
    skip, plain = reports["identity"], reports["none"]
    learned = untrained(accuracy, trained)
    accuracies = accuracy_words(accuracy, recipe)

    def result(key: str, vals: dict[str, list[float]], text: str, verdict, figure=None) -> Result:
        return Result(claims[key], {**vals, "test accuracy with skips": accuracy["identity"],
                                    "test accuracy without skips": accuracy["none"]},
                      f"{text}; {accuracies}", verdict, setting, commands, seconds, figure)

    out = []
    s_with, s_without = report_values(skip, "straightness"), report_values(plain, "straightness")
    cv_with, cv_without = report_values(skip, "spacing_cv"), report_values(plain, "spacing_cv")
    out.append(result("ra1", {"straightness with skips": s_with, "straightness without skips": s_without,
                              "spacing CV with skips": cv_with, "spacing CV without skips": cv_without},
                      f"straightness {mean_sd(s_with)} with skips, {mean_sd(s_without)} without; step-length CV "
                      f"{mean_sd(cv_with)} with, {mean_sd(cv_without)} without",
                      combine([judge(_diff(s_with, s_without), what="straightness, with skips minus without",
                                     preconditions=learned, smoke=smoke),
                               judge(_diff(cv_without, cv_with), what="step-length CV, without skips minus with",
                                     preconditions=learned, smoke=smoke)], "straight and equally spaced")))
    a_with, a_without = report_values(skip, "align_offdiag"), report_values(plain, "align_offdiag")
    base = report_values(skip, "baseline_mean")
    out.append(result("ra2", {"with skips": a_with, "without skips": a_without, "random bases": base},
                      f"{mean_sd(a_with)} with skips, {mean_sd(a_without)} without, random bases {mean_sd(base)}",
                      combine([judge(_diff(a_with, base), what="alignment with skips minus the random baseline",
                                     preconditions=learned, smoke=smoke),
                               judge(_diff(a_with, a_without), what="alignment with skips minus without",
                                     preconditions=learned, smoke=smoke)], "aligned, and not without skips")))
    if "ra3" in claims:
        r_with, r_without = report_values(skip, "topk_ratio"), report_values(plain, "topk_ratio")
        log_gap = [math.log(a) - math.log(b) if a > 0 and b > 0 else math.nan
                   for a, b in zip(r_with, r_without, strict=True)]
        out.append(result("ra3", {"with skips": r_with, "without skips": r_without},
                          f"top-C σ / next-C σ = {mean_sd(r_with)} with skips, {mean_sd(r_without)} without",
                          judge(log_gap, what="log spectral drop after C, with skips minus without",
                                preconditions=learned, smoke=smoke)))
    slope, r2 = report_values(skip, "inv_sigma1_slope"), report_values(skip, "inv_sigma1_r2")
    slope_without, r2_without = report_values(plain, "inv_sigma1_slope"), report_values(plain, "inv_sigma1_r2")
    fit_from = skip[0]["ra4_fit_from"]
    exponent = [ra4_exponent(r["inv_sigma"], r["ra4_fit_from"]) for r in skip]
    exponent_without = [ra4_exponent(r["inv_sigma"], r["ra4_fit_from"]) for r in plain]
    blocks = list(range(1, len(skip[0]["inv_sigma"]) + 1))
    fitted = blocks[fit_from - 1:]
    figure = Curves(f"1/σ₁ by block ({tag}, seed 0)", "block i", "1/σ₁",
                    {"with skips": (blocks, skip[0]["inv_sigma"]),
                     f"least squares from block {fitted[0]}": (fitted, skip[0]["inv_sigma_fit"][fitted[0] - 1:]),
                     "without skips": (blocks, plain[0]["inv_sigma"])})
    ra4 = ra4_verdict(slope, r2, r2_without, len(fitted), learned, smoke, exponent=exponent)
    out.append(result("ra4", {"slope": slope, "r2": r2, "exponent": exponent, "slope without skips": slope_without,
                              "r2 without skips": r2_without, "exponent without skips": exponent_without},
                      f"1/σ₁ from block {fit_from} over {len(fitted)} blocks: slope {mean_sd(slope)} (not comparable "
                      f"with the paper's 0.992, measured at ResNet34's scale of σ₁), R² {mean_sd(r2)}; "
                      f"{exponent_words(exponent)}; without skips slope {mean_sd(slope_without)}, R² "
                      f"{mean_sd(r2_without)}, b = {mean_sd(exponent_without)}", ra4, figure))
    if curves is not None:
        nc = nc_result(claims["nc"], curves, a_with, base, learned, smoke, setting, commands, seconds,
                       {"test accuracy with skips": accuracy["identity"],
                        "test accuracy without skips": accuracy["none"]})
        out.append(replace(nc, lab_value=f"{nc.lab_value}; {accuracies}"))
    return out


def untrained(accuracy: dict[str, list[float]], trained: float = TRAINED) -> list[str]:
    """The failed preconditions of a pair: per arm (``identity``, ``none``) whose mean test accuracy is below
    ``trained`` (or unknown), what it reached."""
    return [f"{name} the net reached {mean_sd(accuracy[shortcut])} test accuracy (needs {trained:g})"
            for shortcut, name in (("identity", "with skips"), ("none", "without skips"))
            if not mean(accuracy[shortcut]) >= trained]


def accuracy_words(accuracy: dict[str, list[float]], recipe: str = "") -> str:
    """Both arms' test accuracies (mean ± sd over the seeds) and, where they differ, how the arm without skips was
    trained: every row prints them, so that a contrast of the two is read beside how far each trained."""
    return (f"test accuracy {mean_sd(accuracy['identity'])} with skips, {mean_sd(accuracy['none'])} without"
            + (f" (trained with {recipe})" if recipe else ""))


def nc_result(claim: Claim, curves: dict[str, list[Curve]], a_with: list[float], base: list[float],
              learned: list[str], smoke: bool, setting: str, commands: list[str], seconds: float,
              extra: dict[str, list[float]]) -> Result:
    """Figure 7's result from NC over training (per shortcut, ``identity`` and, reported beside, ``none``; per seed a
    :data:`Curve` from initialisation to the end) and the RA2 alignment with skips and of random bases per seed; a
    curve of fewer than two points is no measurement of a fall."""
    early, late = ({key: [_log_nc(key, c[index][1].get(key)) if c else math.nan for c in curves["identity"]]
                    for key in NC_FIGURE7} for index in (0, -1))
    without = curves.get("none", [])
    late_without = {key: [_log_nc(key, c[-1][1].get(key)) if c else math.nan for c in without] for key in NC_FIGURE7}
    curve = curves["identity"][0]
    steps = [s for s, _ in curve]
    series = {name: (steps, [max(v.get(key, math.nan), NC_SMALLEST[key]) for _, v in curve])
              for key, name in NC_FIGURE7.items()}
    if without:
        series["NC1 without skips"] = ([s for s, _ in without[0]], [v.get("nc1", math.nan) for _, v in without[0]])
    figure = Curves("NC of the last layer over training, with skips (seed 0)", "step", "value", series, log_y=True)
    values = {**{f"log10 {NC_FIGURE7[k]} at initialisation, with skips": v for k, v in early.items()},
              **{f"log10 {NC_FIGURE7[k]} at the end, with skips": v for k, v in late.items()},
              **({f"log10 {NC_FIGURE7[k]} at the end, without skips": v for k, v in late_without.items()}
                 if without else {}),
              "alignment with skips": a_with, "random bases": base, **extra}
    text = "; ".join(f"{NC_FIGURE7[k]} 10^{mean_sd(early[k])} → 10^{mean_sd(late[k])} with skips"
                     + (f" (10^{mean_sd(late_without[k])} without)" if without else "") for k in NC_FIGURE7)
    short = [f"seed {k}'s NC was measured {len(c)} time(s), not from initialisation to the end"
             for k, c in enumerate(curves["identity"]) if len(c) < 2]
    return Result(claim, values, text, nc_verdict(early, late, a_with, base, [*learned, *short], smoke), setting,
                  commands, seconds, figure)


NC_SMALLEST = {key: 1e-3 if key == "nc4" else 1e-12 for key in NC_FIGURE7}
"""Below these, NC reads as these (its log is finite): NC4, a share of inputs, below one in a thousand."""


def _log_nc(key: str, value: float | None) -> float:
    """log10 of an NC measure, floored at :data:`NC_SMALLEST` (NaN when missing)."""
    if value is None or not math.isfinite(value):
        return math.nan
    return math.log10(max(value, NC_SMALLEST[key]))


RA4_EXPONENT = -1.0
"""The paper's RA4 read without its scale: σ₁ ≈ 1/i is σ₁ ∝ i^b with b = −1 (:func:`ra4_exponent`)."""
RA4_PAPER = "Figure 4b: 1/σ₁ of slope 0.992 from block 5, σ₁ close to 1/i"


def ra4_exponent(inv_sigma: Sequence[float | None], fit_from: int) -> float:
    """The exponent b of σ₁ ∝ i^b from block ``fit_from`` (1-based) on: the least-squares slope of log σ₁ against
    log i, −1 where σ₁ falls as 1/i.

    This is the reading of RA4 the report compares with the paper. The paper's slope of 1/σ₁ against depth (0.992)
    is in its ResNet34's units: σ₁ depends on a network's width, normalisation and data, so the lab's toy nets give
    another slope for the same law (σ₁ = c/i has slope 1/c). Its statement, "a singular value close to 1/i", is the
    law itself, and the log-log exponent reads that law whatever c: −1 for c/i, shallower where 1/σ₁ = a·i + d has
    an offset d > 0 (σ₁ falls more slowly than 1/i), steeper where d < 0. The other scale-free reading, the ratio of
    the line's slope to its intercept, is infinite for 1/i (intercept 0) and changes sign around it: no interval of
    it can be set against the paper's value.

    Args:
        inv_sigma: 1/σ₁ per block (the alignment report's ``inv_sigma``; None as missing).
        fit_from: the first fitted block, 1-based (the report's ``ra4_fit_from``).

    Returns:
        b, or NaN where a fitted block's 1/σ₁ is missing or not positive, or fewer than two blocks are fitted.
    """
    inv = np.asarray([math.nan if v is None else float(v) for v in inv_sigma], dtype=np.float64)[fit_from - 1:]
    if len(inv) < 2 or not (np.isfinite(inv).all() and (inv > 0).all()):
        return math.nan
    log_i = np.log(np.arange(fit_from, fit_from + len(inv), dtype=np.float64))
    return float(np.polyfit(log_i, -np.log(inv), 1)[0])


def exponent_words(exponent: Sequence[float]) -> str:
    """The exponent of :func:`ra4_exponent` over the seeds, its 95% interval, and whether the paper's −1 lies in it,
    in words (the interval of a one-sample t over the seeds: :func:`~lab.reproduce.verdict.t_test`)."""
    stats = t_test(exponent)
    head = f"scale-free, σ₁ ∝ i^b with b = {mean_sd(list(exponent))}"
    if stats.seeds < 2:
        return f"{head}, from {stats.seeds} seed(s): no interval to set against the paper's 1/i (b = −1)"
    low, high = stats.ci95
    tolerance = 1e-9 * max(1.0, abs(RA4_EXPONENT))  # identical exponents: an interval of one point
    interval = f"95% CI [{low:.3g}, {high:.3g}]"
    if low - tolerance <= RA4_EXPONENT <= high + tolerance:
        return f"{head} ({interval}): the paper's 1/i (b = −1) lies inside it"
    pace = "more slowly" if low > RA4_EXPONENT else "faster"
    return (f"{head} ({interval}): the paper's 1/i (b = −1) lies outside it, σ₁ falls {pace} than 1/i over these "
            f"blocks")


def ra4_verdict(slope: list[float], r2: list[float], r2_without: list[float], fitted: int, learned: list[str],
                smoke: bool = False, *, exponent: Sequence[float] | None = None,
                arms: tuple[str, str] = ("with skips", "without"), unit: str = "blocks") -> Verdict:
    """RA4's verdict from per-seed fits of 1/σ₁ against the block index: the slope with skips above 0 (σ₁ falls
    with depth), and its R² above the network's without skips, paired by seed (a line fits, and not without skips,
    where the paper finds no RA); the floor is a mean R² above :data:`RA4_R2` over at least :data:`RA4_BLOCKS`
    fitted blocks. That is the paper's statement in its form, 1/σ₁ linear in depth; its size is compared, not
    judged: with ``exponent``, the reason says whether the paper's σ₁ ≈ 1/i (:data:`RA4_EXPONENT`) lies in the
    interval of the exponent of σ₁ against depth (:func:`ra4_exponent`), so a "holds" whose interval excludes it
    says so. It is not a rule: the paper gives no exponent or spread, and a toy net is not its setting.

    Args:
        slope, r2: per seed, the fit's slope and R² with skips.
        r2_without: per seed, the R² of the same fit without skips.
        fitted: blocks in the fit.
        learned: failed preconditions (networks that did not train).
        smoke: judge nothing.
        exponent: per seed, the exponent b of σ₁ ∝ i^b with skips over the same blocks; None: not compared.
        arms: how the two networks are named (the paper's: with skips, without; the Transformers': trained, at
            initialisation).
        unit: what the fit runs over (blocks; a Transformer's residual steps).
    """
    short = [f"the fit covers {fitted} {unit}; a test of linearity needs at least {RA4_BLOCKS}"] \
        if fitted < RA4_BLOCKS else []
    floor = Floor("a linear fit (mean R²)", RA4_R2, tuple(r2))
    verdict = combine([judge(slope, what=f"slope of 1/σ₁ against depth, {arms[0]}", floor=floor,
                             preconditions=[*learned, *short], smoke=smoke),
                       judge(_diff(r2, r2_without), what=f"R² of that fit, {arms[0]} minus {arms[1]}", floor=floor,
                             preconditions=[*learned, *short], smoke=smoke)], "1/σ₁ rising linearly with depth")
    if exponent is None or verdict.verdict not in JUDGED:
        return verdict
    words = f"against the paper's {RA4_PAPER}: {exponent_words(exponent)}"
    return replace(verdict, reason=f"{verdict.core}; {words}" + (f"; {verdict.sizing}" if verdict.sizing else ""))


def nc_verdict(early: dict[str, list[float]], late: dict[str, list[float]], a_with: list[float], base: list[float],
               learned: list[str], smoke: bool = False) -> Verdict:
    """Figure 7's verdict: each NC measure of :data:`NC_FIGURE7` falls over training in the network with skips (per
    seed, log10 at initialisation minus at the end), where that network shows RA2 (its alignment above the random
    bases).

    Args:
        early, late: per NC key, per seed, log10 of the measure at initialisation and at the end of training.
        a_with, base: per seed, the RA2 alignment with skips and of random bases.
        learned: failed preconditions (networks that did not learn).
        smoke: judge nothing.
    """
    ra = Floor("the random-basis alignment (RA must occur with skips)", float(np.nanmean(base)), tuple(a_with))
    return combine([judge(_diff(early[key], late[key]), what=f"log10 {name}, at initialisation minus at the end",
                          floor=ra, preconditions=learned, smoke=smoke) for key, name in NC_FIGURE7.items()],
                   "NC1–NC4 falling over training")


def claims_of(kind: str) -> list[Claim]:
    """:data:`CLAIMS` as measured on one model type (``fc`` or ``conv``): ids and measures name it. RA3 is the
    paper's statement about fully-connected ResNets: the convolutional experiment does not report it. Figure 7
    follows neural collapse in FC ResNets only: on the conv one it is the lab's extension, judged in a family of its
    own."""
    tag = "FC" if kind == "fc" else "conv"
    return [Claim(f"{c.id}.{kind}", c.paper, c.where, c.statement, c.paper_value,
                  f"{c.measure}; the {tag} ResNet" + ("; the lab's extension (Figure 7 follows FC ResNets only)"
                                                      if kind == "conv" and key == "nc" else ""),
                  c.paper_scale, c.relative, extension=kind == "conv" and key == "nc")
            for key, c in CLAIMS.items() if kind == "fc" or key != "ra3"]
