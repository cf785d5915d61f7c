"""*Residual Connections Harm Generative Representation Learning*, reproduced at toy scale.

Three experiments:

- **Rank against α_min** (the supervised analogue of the paper, its Figure 9, and the correlation of its Figure 6c):
  ``lab sweep`` trains the 32-wide residual MLP on the spiral with shortcuts decayed linearly to α_min for
  α_min = 1.0 … 0.5, and the Table-3b controls (√0.5 on both branches; √0.5 on the residual branch), as ensembles;
  every member's final checkpoint is then measured on held-out points (:func:`lab.analysis.rank_sweep.
  sweep_rank_metrics`: Roy & Vetterli's effective rank of the final features and a ridge probe).
- **The MAE and its probe** (Table 2): a tiny MAE with decayed encoder shortcuts and U-Net skips, pretrained on
  scikit-learn's digits written as an image folder, for α_min 1.0 and 0.6, then probed with the authors' protocol
  (``lab probe --protocol authors``).
- **Diffusion** (Table 4): the tiny U-ViT of ``configs/uvit_tiny_digits.yaml`` generating digits, shortcuts decayed
  per residual sub-layer to α_min 0.7 at the decoder's end against the standard U-ViT (α_min 1.0); each run's
  samples scored by digits-FD (:mod:`lab.reports.fid`, in a digits classifier's features: not comparable with a
  published FID) and its features by the diffusion probe's best (block, noise level) (:mod:`lab.reports.
  diffusion_probe`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from lab.analysis.rank_sweep import member_features, sweep_rank_metrics
from lab.data.readers import write_digits_folder
from lab.reports.diffusion_probe import diffusion_probe_report
from lab.reports.fid import fid_report
from lab.reports.probe import probe_report
from lab.reproduce.claims import Claim, Curves, Result, mean_sd, not_at_this_budget
from lab.reproduce.runs import CONFIGS, ReproductionError, command, train
from lab.runs.store import RunStore, config_of_run
from lab.sweeps import create_sweep, plan_sweep, train_sweep
from lab.train.build import build_data, build_model

P = "decayed"
CLAIMS = {
    "rank": Claim("decayed.rank", P, "Figure 9", "decaying the identity shortcut lowers the feature rank in the "
                  "supervised setup, at every depth and every stage of training",
                  "lower effective rank for lower α_min (ResNets on an ImageNet subset)",
                  "Spearman ρ between α_min and the final-layer effective rank across the sweep (positive: lower "
                  "α_min, lower rank); residual MLP on the spiral"),
    "correlation": Claim("decayed.rank_probe", P, "Figure 6c", "feature rank and linear-probe accuracy are "
                         "negatively correlated across α_min", "Pearson r −0.42 … −0.58 over epochs 200–800 (MAE, "
                         "ImageNet-100)", "Pearson r across the sweep of final-layer effective rank against the "
                         "ridge probe's accuracy"),
    "controls": Claim("decayed.controls", P, "Table 3b", "scaling both branches by √0.5 helps less than the decayed "
                      "shortcut, and scaling the residual branch alone does not help",
                      "probe 76.5 standard, 76.9 x + √0.5 f(x), 82.6 √0.5 (x + f(x)), 83.6 decayed α_min 0.6",
                      "final-layer effective rank of √0.5 (x + f(x)) and x + √0.5 f(x) against the decayed sweep"),
    "mae": Claim("decayed.mae_probe", P, "Table 2", "MAE's linear-probe accuracy rises as α_min falls to 0.5–0.6",
                 "ViT-B/16 on ImageNet-100: 76.5 at α_min 1.0, 83.6 at 0.6",
                 "probe accuracy (authors' protocol) of a tiny MAE pretrained on digits, α_min 0.6 minus α_min 1.0"),
    "diffusion_fid": Claim("decayed.diffusion_fid", P, "Table 4", "decaying the shortcuts of a diffusion model up to "
                           "the end of the decoder improves its samples", "FID 14.3 at α_min 1.0, 9.0 at 0.7 (U-ViT, "
                           "unconditional CIFAR-100)", "digits-FD of a tiny U-ViT's samples of digits, α_min 0.7 "
                           "minus α_min 1.0 (negative: better)"),
    "diffusion_probe": Claim("decayed.diffusion_probe", P, "Table 4", "... and raises the linear-probe accuracy of its "
                             "features", "62.5 % at α_min 1.0, 66.9 % at 0.7 (best layer and noise level)",
                             "the diffusion probe's best (block, t) accuracy of the same runs, α_min 0.7 minus "
                             "α_min 1.0"),
}
SIZES = {
    "smoke": {"alphas": [1.0, 0.7, 0.5], "n": 1024, "epochs": 2, "depth": 6, "width": 8, "points": 256,
              "mae_epochs": 1, "mae_every": 8, "probe_epochs": 5,
              "uvit": ["model.embed_dim=16", "model.depth=2", "model.num_heads=2", "train.max_steps=10",
                       "train.eval_every=10", "train.warmup_steps=2", "train.samples=4", "train.sample_steps=3"],
              "fid_num": 64, "diffusion_probe": {"times": (0.02, 0.2), "epochs": 5, "limit": 400}},
    "cpu": {"alphas": [1.0, 0.9, 0.8, 0.7, 0.6, 0.5], "n": 8192, "epochs": 6, "depth": 32, "width": 32,
            "points": 1024, "mae_epochs": 8, "mae_every": 1, "probe_epochs": 200,
            "uvit": ["train.max_steps=400", "train.eval_every=400"], "fid_num": 500, "diffusion_probe": {}},
}
MAE_MODEL = ["model.embed_dim=64", "model.depth=4", "model.num_heads=4", "model.decoder_embed_dim=64",
             "model.decoder_depth=2", "model.decoder_num_heads=4", "model.global_pool=avg"]
MAE_RECIPE = ["train.batch_size=64", "train.warmup_epochs=1", "train.lr_scaling=none", "train.lr=1e-3",
              "train.probe_every=0", "data.workers=0"]
FULL_SCALE = {
    "rank": [command("sweep", "configs/spiral.yaml", "model.shortcut=linear", "model.alpha_min=1.0,0.8,0.6,0.5")],
    "mae": ["for a in 1.0 0.9 0.8 0.7 0.6 0.5; do torchrun --nproc_per_node=4 -m lab train "
            "configs/mae_vit_b16_in100.yaml data.root=/data/imagenet100 model.alpha_min=$a; done",
            command("probe", "RUN", "--protocol", "authors")],
    "diffusion": ["for a in 1.0 0.7; do torchrun --nproc_per_node=8 -m lab train configs/uvit_small_cifar100.yaml "
                  "data.root=/data/cifar100_png model.alpha_min=$a; done",
                  command("fid", "RUN", "--reference", "/data/cifar100_png/train", "--inception-weights", "FILE",
                          "--num", "50000", "--sampler", "sde", "--steps", "1000"),
                  command("probe", "RUN")],
}


def _sweep(overrides: list[str], store: RunStore, sizes: dict) -> tuple[list[dict], dict, str]:
    """Train a sweep of configs/spiral.yaml; the members' final-layer measures and the command."""
    args = [f"data.n={sizes['n']}", f"train.epochs={sizes['epochs']}", f"model.depth={sizes['depth']}",
            f"model.width={sizes['width']}", "train.lr=0.003", *overrides]
    plan = plan_sweep(CONFIGS / "spiral.yaml", args)
    folder, runs = create_sweep(plan, store)
    statuses = train_sweep(plan, folder, runs, progress=False)
    bad = [f"{r.id}: {s['state']}" for r, s in zip(runs, statuses, strict=True) if s["state"] != "completed"]
    if bad:
        raise ReproductionError("sweep members did not complete: " + "; ".join(bad))
    cfg = config_of_run(runs[0])
    data = build_data(cfg)
    models = []
    for run in runs:
        model = build_model(config_of_run(run), data)
        model.load_state_dict(run.load_checkpoint("last")["model"])
        models.append(model.eval())
    n = min(sizes["points"], len(data.x_test), len(data.x_train))
    with torch.no_grad():
        features = member_features(models, torch.cat([data.x_train[:n], data.x_test[:n]]))
    frame = sweep_rank_metrics(features[:, :, :n], data.y_train[:n], features[:, :, n:], data.y_test[:n],
                               num_classes=data.num_classes)
    members = [{**m.values, "rank": float(frame["effective_rank"][k, -1]),
                "rank_by_layer": frame["effective_rank"][k].tolist(), "probe": float(frame["probe_acc"][k, -1]),
                "test_acc": statuses[k].get("metrics", {}).get("test_acc")}
               for k, m in enumerate(plan.members)]
    return members, frame, command("sweep", "configs/spiral.yaml", *args)


def measure_rank(budget: str, seeds: int, store: RunStore, tick: Callable[[], None] = lambda: None) -> list[Result]:
    """Figure 9, Figure 6c and Table 3b at toy scale (see the module docstring)."""
    claims = [CLAIMS["rank"], CLAIMS["correlation"], CLAIMS["controls"]]
    if budget not in SIZES:
        return [not_at_this_budget(c, FULL_SCALE["rank"] + FULL_SCALE["mae"], "the paper's scale (ViT-B/16 on "
                                   "ImageNet-100, ResNets on ImageNet) runs on GPU machines") for c in claims]
    from scipy.stats import spearmanr  # imported here: scipy.stats takes a second, and every CLI command loads this

    sizes = SIZES[budget]
    start = time.perf_counter()
    rho, r, controls, commands, first = [], [], {"scaled_both": [], "scaled_branch": [], "decayed 0.6": []}, [], None
    saturated = []
    for seed in range(seeds):
        seeded = [f"model.seed={seed}", f"train.seed={seed}"]
        alphas = ",".join(f"{a:g}" for a in sizes["alphas"])
        members, frame, line = _sweep(["model.shortcut=linear", f"model.alpha_min={alphas}", *seeded], store, sizes)
        tick()
        ctrl, _, ctrl_line = _sweep(["model.shortcut=scaled_both,scaled_branch", *seeded], store, sizes)
        tick()
        a = np.array([m["model.alpha_min"] for m in members])
        ranks, probes = np.array([m["rank"] for m in members]), np.array([m["probe"] for m in members])
        rho.append(float(spearmanr(a, ranks).statistic))
        r.append(float(frame["pearson_r_effective_rank"]))
        saturated.append(float(probes.min()))
        nearest = int(np.argmin(np.abs(a - 0.6)))
        controls["decayed 0.6"].append(float(ranks[nearest]))
        for m in ctrl:
            controls[m["model.shortcut"]].append(m["rank"])
        if seed == 0:
            commands = [line, ctrl_line]
            first = (a, members, ctrl)
    seconds = time.perf_counter() - start
    a, members, ctrl = first
    layers = list(range(len(members[0]["rank_by_layer"])))
    figure = Curves("Effective rank by layer (seed 0)", "layer", "effective rank exp(H)",
                    {**{f"α_min = {m['model.alpha_min']:g}": (layers, m["rank_by_layer"]) for m in members},
                     **{m["model.shortcut"]: (layers, m["rank_by_layer"]) for m in ctrl}})
    out = [Result(CLAIMS["rank"], {"spearman rho": rho}, f"ρ(α_min, final rank) = {mean_sd(rho)}; rank "
                  f"{members[0]['rank']:.3g} at α_min {a[0]:g}, {members[-1]['rank']:.3g} at {a[-1]:g} (seed 0)",
                  "holds" if min(rho) > 0 else "differs",
                  "lower α_min gives lower final-layer rank in every seed" if min(rho) > 0 else
                  "the rank does not fall with α_min in every seed", commands, seconds, figure)]
    if min(saturated) > 0.99:
        out.append(Result(CLAIMS["correlation"], {"pearson r": r, "lowest probe accuracy": saturated},
                          f"r = {mean_sd(r)}; probe accuracy ≥ {min(saturated):.3f} for every member",
                          "not measurable", "the probe is saturated on this task (every member reads the classes "
                          "from its final features), so its correlation with rank carries no signal; the paper "
                          "measures it on MAE features, which the MAE claim probes", commands, seconds))
    else:
        out.append(Result(CLAIMS["correlation"], {"pearson r": r}, f"r = {mean_sd(r)}",
                          "holds" if max(r) < 0 else "differs", "negative in every seed" if max(r) < 0 else
                          "not negative in every seed", commands, seconds))
    both, branch, decayed = controls["scaled_both"], controls["scaled_branch"], controls["decayed 0.6"]
    order = all(d < b < s for d, b, s in zip(decayed, both, branch, strict=True))
    out.append(Result(CLAIMS["controls"], controls, f"final rank: decayed α_min 0.6 {mean_sd(decayed)}, "
                      f"√0.5 (x + f(x)) {mean_sd(both)}, x + √0.5 f(x) {mean_sd(branch)}",
                      "holds" if order else "differs",
                      ("in rank, the paper's order of probe accuracy: decayed lowest, then scaling both, then "
                       "scaling the branch, in every seed (the toy probe is saturated, so rank stands in for it)")
                      if order else "the ranks are not ordered decayed < both < branch in every seed",
                      commands, seconds))
    return out


def measure_mae(budget: str, seeds: int, store: RunStore, work: Path,
                tick: Callable[[], None] = lambda: None) -> list[Result]:
    """Table 2 at toy scale: a tiny MAE on digits for α_min 1.0 and 0.6, probed as the authors' code does."""
    claim = CLAIMS["mae"]
    if budget not in SIZES:
        return [not_at_this_budget(claim, FULL_SCALE["mae"], "MAE ViT-B/16 on ImageNet-100 takes about 200 GPU hours "
                                   "per run, as the paper says")]
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
    holds = min(gain) > 0
    return [Result(claim, {"α_min 1.0": probes[1.0], "α_min 0.6": probes[0.6], "gain": gain},
                   f"probe {mean_sd(probes[1.0])} at α_min 1.0, {mean_sd(probes[0.6])} at 0.6 (gain {mean_sd(gain)})",
                   "holds" if holds else "differs",
                   "α_min 0.6 probes better in every seed" if holds else
                   "α_min 0.6 does not probe better in every seed; a 4-block MAE pretrained for minutes on 1,347 "
                   "8 × 8 digits is far from the paper's 12-block ViT-B/16 on ImageNet-100",
                   commands, time.perf_counter() - start)]


def measure_diffusion(budget: str, seeds: int, store: RunStore,
                      tick: Callable[[], None] = lambda: None) -> list[Result]:
    """Table 4 at toy scale: the tiny U-ViT on digits at α_min 1.0 and 0.7, digits-FD and the diffusion probe."""
    claims = [CLAIMS["diffusion_fid"], CLAIMS["diffusion_probe"]]
    if budget not in SIZES:
        return [not_at_this_budget(c, FULL_SCALE["diffusion"], "U-ViT-S on CIFAR-100 trains for 500,000 steps on "
                                   "GPUs, and FID needs 50,000 samples and the FID Inception's weights")
                for c in claims]
    sizes = SIZES[budget]
    start = time.perf_counter()
    fds: dict[float, list[float]] = {1.0: [], 0.7: []}
    probes: dict[float, list[float]] = {1.0: [], 0.7: []}
    commands = []
    for seed in range(seeds):
        for alpha in fds:
            overrides = [f"model.alpha_min={alpha:g}", *sizes["uvit"], f"model.seed={seed}", f"train.seed={seed}"]
            run, line = train("uvit_tiny_digits", overrides, store, f"uvit-a{alpha:g}-s{seed}")
            fid = fid_report(run, reference="digits", features="digits-classifier", num=sizes["fid_num"],
                             device="cpu", progress=False)
            probe = diffusion_probe_report(run, device="cpu", **sizes["diffusion_probe"])
            fds[alpha].append(fid["value"])
            probes[alpha].append(probe["top1"])
            if seed == 0:
                commands += [line, command("fid", run.id, "--reference", "digits", "--features", "digits-classifier",
                                           "--num", str(sizes["fid_num"])), command("probe", run.id)]
            tick()
    seconds = time.perf_counter() - start
    fd_gain = [b - a for a, b in zip(fds[1.0], fds[0.7], strict=True)]
    probe_gain = [b - a for a, b in zip(probes[1.0], probes[0.7], strict=True)]
    scale = ("a 0.3 M-parameter U-ViT trained for minutes on 1,617 8 × 8 digits is far from U-ViT-S trained for "
             "500,000 steps on CIFAR-100")
    fid_holds, probe_holds = max(fd_gain) < 0, min(probe_gain) > 0
    return [
        Result(claims[0], {"α_min 1.0": fds[1.0], "α_min 0.7": fds[0.7], "change": fd_gain},
               f"digits-FD {mean_sd(fds[1.0])} at α_min 1.0, {mean_sd(fds[0.7])} at 0.7 (change {mean_sd(fd_gain)})",
               "holds" if fid_holds else "differs",
               "α_min 0.7 scores a lower digits-FD in every seed" if fid_holds else
               f"α_min 0.7 does not score a lower digits-FD in every seed; {scale}", commands, seconds),
        Result(claims[1], {"α_min 1.0": probes[1.0], "α_min 0.7": probes[0.7], "gain": probe_gain},
               f"best probe {mean_sd(probes[1.0])} at α_min 1.0, {mean_sd(probes[0.7])} at 0.7 (gain "
               f"{mean_sd(probe_gain)})", "holds" if probe_holds else "differs",
               "α_min 0.7 probes better in every seed" if probe_holds else
               f"α_min 0.7 does not probe better in every seed; {scale}", commands, seconds),
    ]
