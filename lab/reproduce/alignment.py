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
values with skips; RA4 1/σ₁ rising with depth (slope > 0, its interval printed beside the paper's 0.992), linear
(mean R² above 0.8 over at least 5 fitted blocks) and more linear than without skips; Figure 7 NC1–NC4 falling over
training (the last value against the network's at initialisation, on the paper's log scale) in the network with
skips where it shows RA2;
the skip/no-skip contrast of NC is reported, not judged. Every claim needs both networks to have learned (test
accuracy well above chance).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch

from lab.analysis.residual_alignment import collapse_of
from lab.reports.alignment import alignment_report
from lab.reproduce.claims import Claim, Curves, Result, mean_sd
from lab.reproduce.runs import command, config, train
from lab.reproduce.verdict import Floor, Verdict, combine, judge
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
                 "begins", "1/σ₁ linear in depth post block 5, slope 0.992",
                 "judged: the least-squares slope of 1/σ₁ against the block index from block 5 (with skips) above 0, "
                 "and its R² above the network without skips, with a mean R² above 0.8 over at least 5 fitted "
                 "blocks as the floor; the slope's interval is printed beside the paper's 0.992, not judged",
                 PAPER_SCALE),
    "nc": Claim("alignment.nc", P, "Figure 7", "neural collapse emerges over training in networks that show residual "
                "alignment", "NC1–NC4 fall over 350 epochs (Type 4a on MNIST) while RA emerges",
                "per seed, log10 of NC1, NC2 (equinorm and maximal equiangularity of the class means), NC3 and NC4 "
                "of the last layer at initialisation minus at the end of training, in the network with skips, where "
                "it shows RA2 (its alignment above the random bases); the network without skips reported beside it, "
                "not judged", PAPER_SCALE),
}
SIZES = {  # per budget: training epochs, analysed inputs, FC width and depth, conv channels and blocks
    "smoke": {"epochs": 2, "inputs": 12, "width": 24, "depth": 6, "channels": 4, "blocks": 6, "nc_inputs": 100},
    "cpu": {"epochs": 30, "inputs": 64, "width": 128, "depth": 12, "channels": 8, "blocks": 12, "nc_inputs": 500},
}
LEARNED = 0.5
"""The test accuracy both networks must reach (ten digits: chance is 0.1) for a comparison of them to mean anything."""
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
    return ["model.name=conv_resnet", f"model.depths=[{sizes['blocks']}]", f"model.channels=[{sizes['channels']}]",
            "model.feature_size=8"]


def scale(kind: str, budget: str) -> str:
    """The lab's setting of the experiment on ``kind`` at ``budget``."""
    s = SIZES[budget]
    model = (f"FC ResNet of {s['depth']} blocks × {s['width']}" if kind == "fc"
             else f"conv ResNet of {s['blocks']} blocks × {s['channels']} channels")
    return f"{model}, scikit-learn digits (1,347 training images of 8 × 8), {s['epochs']} epochs of SGD"


def report_values(reports: list[dict], key: str) -> list[float]:
    """``key`` of each alignment report (None as NaN)."""
    return [math.nan if r.get(key) is None else float(r[key]) for r in reports]


def _diff(with_: list[float], without: list[float]) -> list[float]:
    """Paired differences by seed."""
    return [a - b for a, b in zip(with_, without, strict=True)]


def _train_pairs(kind: str, sizes: dict[str, int], seeds: int, store: RunStore, tick: Callable[[], None]
                 ) -> tuple[dict[str, list[dict]], dict[str, list[Curve]], dict[str, list[float]],
                            list[str]]:
    """Train the network with skips (``identity``) and without (``none``) for every seed, and analyse each: per
    shortcut, the alignment reports, the NC1 curves over training and the test accuracies; and the commands that do
    the same (seed 0's)."""
    reports: dict[str, list[dict]] = {"identity": [], "none": []}
    curves: dict[str, list[Curve]] = {"identity": [], "none": []}
    accuracy: dict[str, list[float]] = {"identity": [], "none": []}
    commands: list[str] = []
    for seed in range(seeds):
        for shortcut in reports:
            overrides = [*_model_overrides(kind, sizes), f"model.shortcut={shortcut}", f"model.seed={seed}",
                         f"train.seed={seed}", f"train.epochs={sizes['epochs']}"]
            data = build_data(config("ra_fc_digits", overrides))
            n = sizes["nc_inputs"]
            collapse = CollapseOverTraining(data.x_train[:n], data.y_train[:n])
            run, line = train("ra_fc_digits", overrides, store, f"ra-{kind}-{shortcut}-s{seed}",
                              callbacks=[collapse], data=data)
            reports[shortcut].append(alignment_report(run, inputs=sizes["inputs"], nc_inputs=sizes["nc_inputs"]))
            curves[shortcut].append(collapse.curve)
            accuracy[shortcut].append(float(run.read_status()["metrics"]["test_acc"]))
            analyze = command("analyze", "alignment", run.id, "--inputs", str(sizes["inputs"]), "--nc-inputs",
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
    sizes = SIZES[budget]
    start = time.perf_counter()
    reports, curves, accuracy, commands = _train_pairs(kind, sizes, seeds, store, tick)
    return judged(kind, reports, curves, accuracy, scale(kind, budget), commands, time.perf_counter() - start,
                  budget == "smoke")


Curve = list[tuple[int, dict[str, float]]]
"""NC of the last layer over training: ``(step, {NC key: value})`` per evaluation (or kept checkpoint)."""


def judged(kind: str, reports: dict[str, list[dict]], curves: dict[str, list[Curve]] | None,
           accuracy: dict[str, list[float]], setting: str, commands: list[str], seconds: float, smoke: bool
           ) -> list[Result]:
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
    """
    tag = "FC" if kind == "fc" else "conv"
    claims = {c.id.split(".")[1]: c for c in claims_of(kind)}
    skip, plain = reports["identity"], reports["none"]
    learned = [f"the network {name} reached {mean_sd(acc)} test accuracy, not {LEARNED:g}"
               for name, acc in (("with skips", accuracy["identity"]), ("without skips", accuracy["none"]))
               if not np.nanmean(acc) >= LEARNED]

    def result(key: str, vals: dict[str, list[float]], text: str, verdict, figure=None) -> Result:
        return Result(claims[key], {**vals, "test accuracy with skips": accuracy["identity"],
                                    "test accuracy without skips": accuracy["none"]},
                      text, verdict, setting, commands, seconds, figure)

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
                          f"top-C σ / next σ = {mean_sd(r_with)} with skips, {mean_sd(r_without)} without",
                          judge(log_gap, what="log spectral drop after C, with skips minus without",
                                preconditions=learned, smoke=smoke)))
    slope, r2 = report_values(skip, "inv_sigma1_slope"), report_values(skip, "inv_sigma1_r2")
    slope_without, r2_without = report_values(plain, "inv_sigma1_slope"), report_values(plain, "inv_sigma1_r2")
    fit_from = skip[0]["ra4_fit_from"]
    blocks = list(range(1, len(skip[0]["inv_sigma"]) + 1))
    fitted = blocks[fit_from - 1:]
    figure = Curves(f"1/σ₁ by block ({tag}, seed 0)", "block i", "1/σ₁",
                    {"with skips": (blocks, skip[0]["inv_sigma"]),
                     f"least squares from block {fitted[0]}": (fitted, skip[0]["inv_sigma_fit"][fitted[0] - 1:]),
                     "without skips": (blocks, plain[0]["inv_sigma"])})
    ra4 = ra4_verdict(slope, r2, r2_without, len(fitted), learned, smoke)
    interval = ra4.parts[0].stats.ci95 if ra4.parts else (math.nan, math.nan)
    out.append(result("ra4", {"slope": slope, "r2": r2, "slope without skips": slope_without,
                              "r2 without skips": r2_without},
                      f"slope {mean_sd(slope)} (95% CI [{interval[0]:.3g}, {interval[1]:.3g}]; the paper's 0.992, "
                      f"not judged), R² {mean_sd(r2)} from block {fit_from} over {len(fitted)} blocks; without skips "
                      f"slope {mean_sd(slope_without)}, R² {mean_sd(r2_without)}", ra4, figure))
    if curves is not None:
        out.append(nc_result(claims["nc"], curves, a_with, base, learned, smoke, setting, commands, seconds,
                             {"test accuracy with skips": accuracy["identity"],
                              "test accuracy without skips": accuracy["none"]}))
    return out


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


def ra4_verdict(slope: list[float], r2: list[float], r2_without: list[float], fitted: int, learned: list[str],
                smoke: bool = False) -> Verdict:
    """RA4's verdict from per-seed fits of 1/σ₁ against the block index: the slope with skips above 0, and its R²
    above the network's without skips, paired by seed; the floor is a mean R² above :data:`RA4_R2` over at least
    :data:`RA4_BLOCKS` fitted blocks.

    Args:
        slope, r2: per seed, the fit's slope and R² with skips.
        r2_without: per seed, the R² of the same fit without skips.
        fitted: blocks in the fit.
        learned: failed preconditions (networks that did not learn).
        smoke: judge nothing.
    """
    short = [f"the fit covers {fitted} blocks; a test of linearity needs at least {RA4_BLOCKS}"] \
        if fitted < RA4_BLOCKS else []
    floor = Floor("a linear fit (mean R²)", RA4_R2, tuple(r2))
    return combine([judge(slope, what="slope of 1/σ₁ against depth, with skips", floor=floor,
                          preconditions=[*learned, *short], smoke=smoke),
                    judge(_diff(r2, r2_without), what="R² of that fit, with skips minus without", floor=floor,
                          preconditions=[*learned, *short], smoke=smoke)], "1/σ₁ rising linearly with depth")


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
    paper's statement about fully-connected ResNets: the convolutional experiment does not report it."""
    tag = "FC" if kind == "fc" else "conv"
    return [Claim(f"{c.id}.{kind}", c.paper, c.where, c.statement, c.paper_value,
                  f"{c.measure}; the {tag} ResNet", c.paper_scale, c.relative)
            for key, c in CLAIMS.items() if kind == "fc" or key != "ra3"]
