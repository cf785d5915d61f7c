"""*Residual Alignment: Uncovering the Mechanisms of Residual Networks*, reproduced on scikit-learn's digits.

One experiment per model type — the fully-connected ResNet (Type 4, 8 post-activation blocks) and a convolutional
one (8 basic blocks in one stage) — trained with and without skip connections for each seed, then analysed as
``python -m lab analyze alignment`` does (:func:`lab.reports.alignment.alignment_report`: K = 30, RA4 fitted from
block 5). The paper's claims: RA1 straight, equally spaced trajectories; RA2 aligned singular vectors across blocks;
RA3 Jacobians of rank about C; RA4 top singular values falling as 1/depth; all four with skips and not without;
and neural collapse growing with depth where RA occurs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from lab.reports.alignment import alignment_report
from lab.reproduce.claims import Claim, Curves, Result, mean_sd, not_at_this_budget
from lab.reproduce.runs import command, train
from lab.runs.store import RunStore

P = "alignment"
CLAIMS = {
    "ra1": Claim("alignment.ra1", P, "Figure 1", "RA1: intermediate representations of an input lie on a line "
                 "through the blocks, equally spaced", "qualitative (trajectories on two random directions)",
                 "straightness of h_0 … h_L (1 = a line), with skips against without"),
    "ra2": Claim("alignment.ra2", P, "Figure 2", "RA2: the top singular vectors of the residual Jacobians align "
                 "across blocks; RA does not occur without skip connections",
                 "diagonal U_jᵀ J_i V_j for all block pairs (K = 30)",
                 "mean alignment score over block pairs i ≠ j against Haar-random bases, with and without skips"),
    "ra3": Claim("alignment.ra3", P, "Figure 3", "RA3: residual Jacobians have rank at most about the number of "
                 "classes C", "top-C singular values dominate", "mean of the top-C σ over the mean of the next ones "
                 "(with skips)"),
    "ra4": Claim("alignment.ra4", P, "Figure 4b", "RA4: the top singular value of block i scales as 1/i after RA "
                 "begins", "1/σ₁ linear in depth post block 5, slope 0.992",
                 "least-squares slope and R² of 1/σ₁ against the block index from block 5 (with skips)"),
    "nc": Claim("alignment.nc", P, "Figure 7", "neural collapse (NC1) emerges through the depth of networks with "
                "residual alignment", "NC1 falls with depth", "NC1 of the last layer over NC1 of the stem output "
                "(with skips)"),
}
SIZES = {  # per budget: training epochs, analysed inputs, FC width and depth, conv channels and blocks
    "smoke": {"epochs": 2, "inputs": 12, "width": 24, "depth": 6, "channels": 4, "blocks": 6, "nc_inputs": 100},
    "cpu": {"epochs": 30, "inputs": 64, "width": 128, "depth": 8, "channels": 8, "blocks": 8, "nc_inputs": 500},
}
FULL_SCALE = [command("train", "configs/ra_type1.yaml", "data.root=/data/mnist"),
              command("train", "configs/ra_type3.yaml", "data.root=/data/cifar10"),
              command("analyze", "alignment", "RUN", "--inputs", "64")]


def _model_overrides(kind: str, sizes: dict) -> list[str]:
    if kind == "fc":
        return [f"model.depth={sizes['depth']}", f"model.width={sizes['width']}"]
    return ["model.name=conv_resnet", f"model.depths=[{sizes['blocks']}]", f"model.channels=[{sizes['channels']}]",
            "model.feature_size=8"]


def measure(kind: str, budget: str, seeds: int, store: RunStore,
            tick: Callable[[], None] = lambda: None) -> list[Result]:
    """The claims of :data:`CLAIMS` for one model type (``fc`` or ``conv``) at ``budget``.

    Args:
        kind: ``fc`` (Type 4) or ``conv``.
        budget: ``smoke``, ``cpu`` or ``gpu`` (listed only).
        seeds: model and batch-order seeds 0 … seeds − 1 (the data split is fixed).
        store: where the runs are written.
        tick: called after each training and analysis (progress).
    """
    tag = "FC" if kind == "fc" else "conv"
    claims = dict(zip(CLAIMS, claims_of(kind), strict=True))
    if budget not in SIZES:
        return [not_at_this_budget(c, FULL_SCALE, "full scale (ResNet34 types on MNIST, CIFAR, ImageNette) runs on "
                                   "GPU machines: the commands listed") for c in claims.values()]
    sizes = SIZES[budget]
    start = time.perf_counter()
    reports: dict[str, list[dict]] = {"identity": [], "none": []}
    commands: list[str] = []
    for seed in range(seeds):
        for shortcut in reports:
            overrides = [*_model_overrides(kind, sizes), f"model.shortcut={shortcut}", f"model.seed={seed}",
                         f"train.seed={seed}", f"train.epochs={sizes['epochs']}"]
            run, line = train("ra_fc_digits", overrides, store, f"ra-{kind}-{shortcut}-s{seed}")
            reports[shortcut].append(alignment_report(run, inputs=sizes["inputs"], nc_inputs=sizes["nc_inputs"]))
            analyze = command("analyze", "alignment", run.id, "--inputs", str(sizes["inputs"]), "--nc-inputs",
                              str(sizes["nc_inputs"]))
            if seed == 0:
                commands += [line, analyze]
            tick()
    seconds = time.perf_counter() - start
    skip, plain = reports["identity"], reports["none"]

    def values(rs: list[dict], key: str) -> list[float]:
        return [np.nan if r[key] is None else float(r[key]) for r in rs]

    def result(key: str, vals: dict[str, list[float]], text: str, holds: bool, reason: str) -> Result:
        return Result(claims[key], vals, text, "holds" if holds else "differs", reason, commands, seconds,
                      figure if key == "ra4" else None)

    blocks = list(range(1, len(skip[0]["inv_sigma"]) + 1))
    fitted = blocks[skip[0]["ra4_fit_from"] - 1:]
    figure = Curves(f"1/σ₁ by block ({tag}, seed 0)", "block i", "1/σ₁",
                    {"with skips": (blocks, skip[0]["inv_sigma"]),
                     f"least squares from block {fitted[0]}": (fitted, skip[0]["inv_sigma_fit"][fitted[0] - 1:]),
                     "without skips": (blocks, plain[0]["inv_sigma"])})
    out = []
    s_with, s_without = values(skip, "straightness"), values(plain, "straightness")
    out.append(result("ra1", {"with skips": s_with, "without skips": s_without},
                      f"straightness {mean_sd(s_with)} with skips, {mean_sd(s_without)} without",
                      min(s_with) > max(s_without), "every seed's network with skips is straighter than every one "
                      "without" if min(s_with) > max(s_without) else "the straightness ranges overlap"))
    a_with, a_without = values(skip, "align_offdiag"), values(plain, "align_offdiag")
    base = [(a + b) / 2 for a, b in zip(values(skip, "baseline_mean"), values(plain, "baseline_mean"), strict=True)]
    ra2 = min(a_with) > 2 * max(base) and max(a_without) < min(a_with)
    out.append(result("ra2", {"with skips": a_with, "without skips": a_without, "random bases": base},
                      f"{mean_sd(a_with)} with skips, {mean_sd(a_without)} without, random bases {mean_sd(base)}",
                      ra2, "with skips above twice the random baseline and above every network without, in "
                      "every seed" if ra2 else "the scores with skips are not clearly above the baseline and the "
                      "networks without skips"))
    ratio = values(skip, "topk_ratio")
    out.append(result("ra3", {"with skips": ratio, "without skips": values(plain, "topk_ratio")},
                      f"top-C σ / next σ = {mean_sd(ratio)} with skips", min(ratio) > 1.5,
                      "the top C singular values are more than 1.5 times the next ones in every seed"
                      if min(ratio) > 1.5 else "the spectrum does not drop after C"))
    slope, r2 = values(skip, "inv_sigma1_slope"), values(skip, "inv_sigma1_r2")
    fit_from = skip[0]["ra4_fit_from"]
    ra4 = min(slope) > 0 and min(r2) > 0.8
    out.append(result("ra4", {"slope": slope, "r2": r2, "slope without skips": values(plain, "inv_sigma1_slope")},
                      f"slope {mean_sd(slope)}, R² {mean_sd(r2)} from block {fit_from} "
                      f"(without skips: slope {mean_sd(values(plain, 'inv_sigma1_slope'))})", ra4,
                      ("1/σ₁ rises linearly (R² > 0.8, positive slope) in every seed; the slope is set by the "
                       "scale of this small model, not 1" if ra4 else "1/σ₁ is not linear and rising in every seed")
                      + f"; {len(skip[0]['inv_sigma']) - fit_from + 1} blocks are fitted"))
    nc_ratio = [r["nc1"][-1] / r["nc1"][0] for r in skip]
    out.append(result("nc", {"NC1 last / first": nc_ratio}, f"NC1 last / stem = {mean_sd(nc_ratio)}",
                      max(nc_ratio) < 1, "NC1 is lower at the last layer than at the stem in every seed"
                      if max(nc_ratio) < 1 else "NC1 does not fall with depth in every seed"))
    return out


def claims_of(kind: str) -> list[Claim]:
    """:data:`CLAIMS` as measured on one model type (``fc`` or ``conv``): ids and measures name it."""
    tag = "FC" if kind == "fc" else "conv"
    return [Claim(f"{c.id}.{kind}", c.paper, c.where, c.statement, c.paper_value,
                  f"{c.measure}; {tag} ResNet on digits") for c in CLAIMS.values()]
