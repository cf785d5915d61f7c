"""*Residual Connections Harm Generative Representation Learning*, reproduced at toy scale.

Four experiments (the toy MAE's, for Tables 3a and 3b and Figure 6c, is :mod:`lab.reproduce.toy_mae`):

- **Rank against α_min** (the supervised setup of Figure 9): ``lab sweep`` trains residual MLPs on the spiral with
  shortcuts decayed linearly to α_min = 1.0 … 0.5, as one ensemble per model depth (Figure 9a varies the depth);
  the rank is the paper's Eq. 6 — the entropy of the singular values of the sample-by-sample covariance of the
  last layer's centred features (:func:`lab.analysis.rank.feature_rank`, ``measure="entropy"``) — on held-out
  points, at the end of training for every depth and after every evaluation for the deepest model (Figure 9b).
- **The MAE and its probe** (Table 2): a tiny MAE with decayed encoder shortcuts and U-Net skips, pretrained on
  scikit-learn's digits written as an image folder, for α_min 1.0 and 0.6, then probed with the authors' protocol
  (``lab probe --protocol authors``).
- **Diffusion** (Table 4): the tiny U-ViT of ``configs/uvit_tiny_digits.yaml`` generating digits, shortcuts decayed
  per residual sub-layer to α_min 0.7 at the decoder's end against the standard U-ViT (α_min 1.0); each run's
  samples scored by digits-FD (:mod:`lab.reports.fid`, in a digits classifier's features: not comparable with a
  published FID) once its samples are digits, and its features by the diffusion probe
  (:mod:`lab.reports.diffusion_probe`: cells chosen on a validation split, scored on the test split; the claim reads
  the deepest blocks, where the decay acts).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch

from lab.analysis.rank import feature_rank
from lab.config import CONFIGS
from lab.data.readers import write_digits_folder
from lab.reports.diffusion_probe import diffusion_probe_report
from lab.reports.fid import fid_report
from lab.reports.probe import probe_report
from lab.reproduce.claims import Claim, Curves, Result, mean, mean_sd
from lab.reproduce.runs import ReproductionError, command, train
from lab.reproduce.verdict import Floor, combine, judge
from lab.runs.layout import RunState
from lab.runs.store import RunStore, config_of_run
from lab.sweeps import create_sweep, plan_sweep, train_sweep
from lab.train.build import build_data, build_model
from lab.train.ensemble import EnsembleCallback, EnsembleTrainer

P = "decayed"
CLAIMS = {
    "rank": Claim("decayed.rank", P, "Figure 9", "decaying the identity shortcut lowers the feature rank in the "
                  "supervised setup, at every depth and every stage of training",
                  "lower Eq. 6 rank for lower α_min, for ResNets of 8 to 16 blocks and over training",
                  "Spearman ρ between α_min and the Eq. 6 rank of the last layer's held-out features across the "
                  "sweep (positive: lower α_min, lower rank), at the end for every model depth and averaged over "
                  "the evaluations of training", "ResNet-18 with 8–16 residual blocks on a small subset of ImageNet"),
    "mae": Claim("decayed.mae_probe", P, "Table 2", "MAE's linear-probe accuracy rises as α_min falls to 0.5–0.6",
                 "ViT-B/16 on ImageNet-100: 76.5 at α_min 1.0, 83.6 at 0.6",
                 "probe accuracy (authors' protocol) of a tiny MAE pretrained on digits, α_min 0.6 minus α_min 1.0",
                 "MAE ViT-B/16 on ImageNet-100, 800 epochs", (83.6 - 76.5) / 76.5),
    "diffusion_fid": Claim("decayed.diffusion_fid", P, "Table 4", "decaying the shortcuts of a diffusion model up to "
                           "the end of the decoder improves its samples", "FID 14.3 at α_min 1.0, 9.0 at 0.7 (U-ViT, "
                           "unconditional CIFAR-100)", "digits-FD of a tiny U-ViT's samples of digits, α_min 1.0 "
                           "minus α_min 0.7 (positive: decay lowers it)",
                           "U-ViT-S on CIFAR-100, 500,000 steps at batch 128; FID of 50,000 samples",
                           (14.34 - 8.99) / 14.34),
    "diffusion_probe": Claim("decayed.diffusion_probe", P, "Table 4", "... and raises the linear-probe accuracy of its "
                             "features", "62.5 % at α_min 1.0, 66.9 % at 0.7 (best layer and noise level)",
                             "test accuracy of the diffusion probe in the deepest third of the blocks (the cell chosen "
                             "on a validation split), α_min 0.7 minus α_min 1.0; the best cell of all blocks reported "
                             "beside it", "U-ViT-S on CIFAR-100, 500,000 steps at batch 128",
                             (66.86 - 62.47) / 62.47),
}
SIZES = {
    "smoke": {"alphas": [1.0, 0.7, 0.5], "n": 1024, "epochs": 2, "depths": [4], "width": 8, "points": 256,
              "mae_epochs": 1, "mae_every": 8, "probe_epochs": 5,
              "uvit": ["model.embed_dim=16", "model.depth=2", "model.num_heads=2", "train.max_steps=10",
                       "train.eval_every=10", "train.warmup_steps=2", "train.samples=4", "train.sample_steps=3"],
              "fid_num": 64, "diffusion_probe": {"times": (0.02, 0.2), "epochs": 5, "limit": 400}},
    "cpu": {"alphas": [1.0, 0.9, 0.8, 0.7, 0.6, 0.5], "n": 16384, "epochs": 6, "depths": [8, 16, 32], "width": 32,
            "points": 1024, "mae_epochs": 8, "mae_every": 1, "probe_epochs": 200,
            "uvit": ["model.embed_dim=32", "model.depth=4", "model.num_heads=4", "train.eval_every=0",
                     "train.samples=0"], "fid_num": 500, "diffusion_probe": {"epochs": 50}},
}
LEARNED = 0.9
"""The test accuracy every member of a spiral sweep must reach (chance 0.5) for its rank to describe a classifier."""
DIGITS_FD_MAX = 150.0
"""Samples count as digits below this digits-FD: held-out digits score about 5, uniform noise about 1,000, the
1,800-step tiny U-ViT about 80 (configs/uvit_tiny_digits.yaml)."""
MAE_MODEL = ["model.embed_dim=64", "model.depth=4", "model.num_heads=4", "model.decoder_embed_dim=64",
             "model.decoder_depth=2", "model.decoder_num_heads=4", "model.global_pool=avg"]
MAE_RECIPE = ["train.batch_size=64", "train.warmup_epochs=1", "train.lr_scaling=none", "train.lr=1e-3",
              "train.probe_every=0", "data.workers=0"]


class RankOverTraining(EnsembleCallback):
    """After every evaluation, the Eq. 6 rank of each live member's last-layer features on fixed held-out points.

    Attributes:
        curve: ``(step, {member index: rank})`` per evaluation.
    """

    def __init__(self, x: torch.Tensor) -> None:
        self.x, self.curve = x, []

    def on_eval_end(self, ensemble: EnsembleTrainer, metrics: dict[int, dict[str, float]]) -> None:
        features = ensemble.features(self.x.to(ensemble.device))  # [K, n, H], slot order
        ranks = feature_rank(features.double(), measure="entropy").tolist()
        self.curve.append((ensemble.step, {m.index: r for m, r in zip(ensemble.live, ranks, strict=True)}))


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr  # imported here: scipy.stats takes a second, and every CLI command loads this

    ok = np.isfinite(a) & np.isfinite(b)
    return float(spearmanr(a[ok], b[ok]).statistic) if ok.sum() >= 3 else math.nan


def _sweep(overrides: list[str], store: RunStore, sizes: dict) -> tuple[list[dict], list, str]:
    """Train a sweep of configs/spiral.yaml; each member's final Eq. 6 rank, its rank after every evaluation and the
    command."""
    args = [f"data.n={sizes['n']}", f"train.epochs={sizes['epochs']}", f"model.width={sizes['width']}",
            "train.lr=0.003", *overrides]
    plan = plan_sweep(CONFIGS / "spiral.yaml", args)
    folder, runs = create_sweep(plan, store)
    data = build_data(plan.members[0].config)
    n = min(sizes["points"], len(data.x_test))
    follow = RankOverTraining(data.x_test[:n])
    statuses = train_sweep(plan, folder, runs, progress=False, callbacks=[follow])
    bad = [f"{r.id}: {s['state']}" for r, s in zip(runs, statuses, strict=True) if s["state"] != RunState.COMPLETED]
    if bad:
        raise ReproductionError("sweep members did not complete: " + "; ".join(bad))
    models = []
    for run in runs:
        model = build_model(config_of_run(run), data)
        model.load_state_dict(run.load_checkpoint("last")["model"])
        models.append(model.eval())
    with torch.no_grad():
        final = torch.stack([model.forward_features(data.x_test[:n]) for model in models])  # [K, n, H]
    ranks = feature_rank(final.double(), measure="entropy").tolist()
    members = [{**m.values, "rank": ranks[k], "test_acc": statuses[k].get("metrics", {}).get("test_acc")}
               for k, m in enumerate(plan.members)]
    return members, follow.curve, command("sweep", "configs/spiral.yaml", *args)


def measure_rank(budget: str, seeds: int, store: RunStore, tick: Callable[[], None] = lambda: None) -> list[Result]:
    """Figure 9 at toy scale (see the module docstring)."""
    claim = CLAIMS["rank"]
    sizes = SIZES[budget]
    start = time.perf_counter()
    alphas = ",".join(f"{a:g}" for a in sizes["alphas"])
    rho: dict[int, list[float]] = {d: [] for d in sizes["depths"]}
    rho_training, accuracy, commands, first = [], [], [], {}
    for seed in range(seeds):
        for depth in sizes["depths"]:
            members, curve, line = _sweep([f"model.depth={depth}", "model.shortcut=linear",
                                           f"model.alpha_min={alphas}", f"model.seed={seed}", f"train.seed={seed}"],
                                          store, sizes)
            a = np.array([m["model.alpha_min"] for m in members])
            rho[depth].append(_spearman(a, np.array([m["rank"] for m in members])))
            accuracy.append(min(float(m["test_acc"] or 0.0) for m in members))
            if depth == sizes["depths"][-1]:  # the deepest model, over training
                rho_training.append(float(np.nanmean([_spearman(a, np.array([ranks[k] for k in range(len(a))]))
                                                      for _, ranks in curve])))
            if seed == 0:
                commands.append(line)
                first[depth] = (members, curve)
            tick()
    seconds = time.perf_counter() - start
    members, curve = first[sizes["depths"][-1]]
    steps = [s for s, _ in curve]
    figure = Curves(f"Eq. 6 rank of the last layer over training ({sizes['depths'][-1]} blocks, seed 0)", "step",
                    "Eq. 6 entropy", {f"α_min = {m['model.alpha_min']:g}": (steps, [ranks[k] for _, ranks in curve])
                                      for k, m in enumerate(members)})
    smoke = budget == "smoke"
    learned = [] if min(accuracy) >= LEARNED else \
        [f"a member reached only {min(accuracy):.3g} test accuracy on the spiral, not {LEARNED:g}"]
    parts = [judge(rho[d], what=f"ρ(α_min, rank) at the end, {d} blocks", preconditions=learned, smoke=smoke)
             for d in sizes["depths"]]
    parts.append(judge(rho_training, what=f"ρ(α_min, rank) averaged over training, {sizes['depths'][-1]} blocks",
                       preconditions=learned, smoke=smoke))
    text = "; ".join(f"{d} blocks ρ = {mean_sd(rho[d])}" for d in sizes["depths"]) + \
        f"; over training ρ = {mean_sd(rho_training)}"
    setting = (f"residual MLPs of {', '.join(map(str, sizes['depths']))} blocks × {sizes['width']} on a spiral of "
               f"{sizes['n']} points, {sizes['epochs']} epochs, α_min {alphas}")
    return [Result(claim, {**{f"ρ at {d} blocks": v for d, v in rho.items()}, "ρ over training": rho_training,
                           "lowest member test accuracy": accuracy}, text,
                   combine(parts, "at every depth and over training"), setting, commands, seconds, figure)]


def measure_mae(budget: str, seeds: int, store: RunStore, work, tick: Callable[[], None] = lambda: None
                ) -> list[Result]:
    """Table 2 at toy scale: a tiny MAE on digits for α_min 1.0 and 0.6, probed as the authors' code does."""
    claim = CLAIMS["mae"]
    sizes = SIZES[budget]
    start = time.perf_counter()
    root = write_digits_folder(work / "digits-images", image_size=32, every=sizes["mae_every"])
    probes: dict[float, list[float]] = {1.0: [], 0.6: []}
    commands = []
    for seed in range(seeds):
        for alpha in probes:
            overrides = [f"data.root={root}", f"model.alpha_min={alpha:g}", *MAE_MODEL, *MAE_RECIPE,
                         f"train.epochs={sizes['mae_epochs']}", f"model.seed={seed}", f"train.seed={seed}"]
            run, line = train("mae_tiny", overrides, store, f"mae-a{alpha:g}-s{seed}")
            summary = probe_report(run, protocol="authors", epochs=sizes["probe_epochs"], device="cpu",
                                   progress=False)
            probes[alpha].append(summary["top1"])
            if seed == 0:
                commands += [line, command("probe", run.id, "--protocol", "authors", "--epochs",
                                           str(sizes["probe_epochs"]))]
            tick()
    gain = [b - a for a, b in zip(probes[1.0], probes[0.6], strict=True)]
    ceiling = [f"the probe at α_min {a:g} is at its ceiling ({mean_sd(v)})" for a, v in probes.items()
               if mean(v) >= 0.99]
    verdict = judge(gain, what="probe accuracy, α_min 0.6 minus 1.0", target=claim.relative * mean(probes[1.0]),
                    floor=Floor("chance (1/10) + 0.1", 0.1, tuple(probes[1.0]), 0.1), preconditions=ceiling,
                    smoke=budget == "smoke")
    images = "all" if sizes["mae_every"] == 1 else f"every {sizes['mae_every']}th of"
    setting = (f"MAE ViT of 4 blocks × 64 with U-Net skips, scikit-learn digits upsampled to 32 × 32 ({images} "
               f"1,797 images), {sizes['mae_epochs']} epochs; probe {sizes['probe_epochs']} epochs")
    return [Result(claim, {"α_min 1.0": probes[1.0], "α_min 0.6": probes[0.6], "gain": gain},
                   f"probe {mean_sd(probes[1.0])} at α_min 1.0, {mean_sd(probes[0.6])} at 0.6 (gain {mean_sd(gain)})",
                   verdict, setting, commands, time.perf_counter() - start)]


def measure_diffusion(budget: str, seeds: int, store: RunStore,
                      tick: Callable[[], None] = lambda: None) -> list[Result]:
    """Table 4 at toy scale: the tiny U-ViT on digits at α_min 1.0 and 0.7, digits-FD and the diffusion probe."""
    claims = [CLAIMS["diffusion_fid"], CLAIMS["diffusion_probe"]]
    sizes = SIZES[budget]
    start = time.perf_counter()
    fds: dict[float, list[float]] = {1.0: [], 0.7: []}
    deep: dict[float, list[float]] = {1.0: [], 0.7: []}
    best: dict[float, list[float]] = {1.0: [], 0.7: []}
    cells: list[str] = []
    commands, steps = [], 0
    for seed in range(seeds):
        for alpha in fds:
            overrides = [f"model.alpha_min={alpha:g}", *sizes["uvit"], f"model.seed={seed}", f"train.seed={seed}"]
            run, line = train("uvit_tiny_digits", overrides, store, f"uvit-a{alpha:g}-s{seed}")
            steps = int(run.read_status().get("step") or 0)
            fid = fid_report(run, reference="digits", features="digits-classifier", num=sizes["fid_num"],
                             device="cpu", progress=False)
            probe = diffusion_probe_report(run, device="cpu", **sizes["diffusion_probe"])
            fds[alpha].append(fid["value"])
            deep[alpha].append(probe["deep_top1"])
            best[alpha].append(probe["top1"])
            cells.append(f"α_min {alpha:g} seed {seed}: best {probe['block']} t={probe['t']:g}, deepest "
                         f"{probe['deep_block']} t={probe['deep_t']:g}")
            if seed == 0:
                commands += [line, command("fid", run.id, "--reference", "digits", "--features", "digits-classifier",
                                           "--num", str(sizes["fid_num"])), command("probe", run.id)]
            tick()
    seconds = time.perf_counter() - start
    smoke = budget == "smoke"
    not_digits = [f"the samples at α_min {a:g} are not yet digits (digits-FD {mean_sd(v)}; digits count below "
                  f"{DIGITS_FD_MAX:g})" for a, v in fds.items() if not mean(v) < DIGITS_FD_MAX]
    fd_gain = [a - b for a, b in zip(fds[1.0], fds[0.7], strict=True)]
    deep_gain = [b - a for a, b in zip(deep[1.0], deep[0.7], strict=True)]
    model = config_of_run(run).model  # as trained: the budget's overrides, else the builder's defaults
    width, blocks = model.get("embed_dim"), 2 * (model.get("depth") // 2) + 1  # in blocks, the mid block, out blocks
    setting = (f"tiny U-ViT ({width} wide, {blocks} blocks, 2 × 2 patches) on scikit-learn digits, {steps} steps at "
               f"batch 128; digits-FD of {sizes['fid_num']} probability-flow samples in a digits classifier's "
               "features")
    fid_claim, probe_claim = claims
    return [
        Result(fid_claim, {"α_min 1.0": fds[1.0], "α_min 0.7": fds[0.7], "improvement": fd_gain},
               f"digits-FD {mean_sd(fds[1.0])} at α_min 1.0, {mean_sd(fds[0.7])} at 0.7 (lower by {mean_sd(fd_gain)})",
               judge(fd_gain, what="digits-FD, α_min 1.0 minus 0.7", target=fid_claim.relative * mean(fds[1.0]),
                     preconditions=not_digits, smoke=smoke), setting, commands, seconds),
        Result(probe_claim, {"deepest blocks, α_min 1.0": deep[1.0], "deepest blocks, α_min 0.7": deep[0.7],
                             "best cell, α_min 1.0": best[1.0], "best cell, α_min 0.7": best[0.7]},
               f"deepest-block probe {mean_sd(deep[1.0])} at α_min 1.0, {mean_sd(deep[0.7])} at 0.7; best cell "
               f"{mean_sd(best[1.0])} and {mean_sd(best[0.7])} ({'; '.join(cells[:2])})",
               judge(deep_gain, what="deepest-block probe, α_min 0.7 minus 1.0",
                     target=probe_claim.relative * mean(deep[1.0]),
                     floor=Floor("chance (1/10) + 0.1", 0.1, tuple(deep[1.0]), 0.1), smoke=smoke), setting,
               commands, seconds),
    ]
