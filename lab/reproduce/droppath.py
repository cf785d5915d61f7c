"""*ResidualDroppath: Enhancing Feature Reuse over Residual Connections*, reproduced at toy scale.

Two experiments:

- **Figure 3**: the paper's 32-layer, 32-wide residual MLP trained on its spiral; the Euclidean distance between
  every layer's features over the 50 × 50 input grid (:func:`lab.jobs.builders.similarity_snapshot`). The paper
  reads "similarity decreases and increases across multiple layers" off the heatmap: the distance to the first
  layer does not grow monotonically. The same model trained with ResidualDroppath is drawn beside it.
- **Table 1 at toy scale**: a small convolutional ResNet on scikit-learn's digits, trained as Standard, Droppath
  (timm's stochastic depth) and Ours (ResidualDroppath, Algorithm 1), drop rate 0.1, over seeds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from lab.jobs.builders import similarity_snapshot
from lab.reports.alignment import load_trained
from lab.reproduce.claims import Claim, Curves, Result, mean, mean_sd
from lab.reproduce.runs import train
from lab.reproduce.verdict import combine, judge
from lab.runs.store import RunStore

P = "droppath"
CLAIMS = {
    "figure3": Claim("droppath.figure3", P, "Figure 3", "feature similarity decreases and increases across "
                     "multiple layers: the model transforms the previous layer's feature distribution several times",
                     "qualitative (heatmap of a 32 × 32 MLP on the spiral)",
                     "layers l where the distance to layer 0 falls below that of layer l − 1 (0: monotonic)",
                     "32-block, 32-wide residual MLP on the 2-D spiral"),
    "table1": Claim("droppath.table1", P, "Table 1", "ResidualDroppath (Ours) gives the highest mean test accuracy, "
                    "above Droppath and Standard training", "CIFAR-10 ResNet50: 88.07 ± 0.23 Standard, 88.33 ± 0.12 "
                    "Droppath, 89.22 ± 0.16 Ours (5 seeds); MNIST: 99.26, 99.29, 99.32",
                    "test accuracy of a small conv ResNet on digits: Ours minus Droppath and Ours minus Standard, "
                    "paired by seed, drop rate 0.1", "ResNet50 and ResNet50d on MNIST, CIFAR-10 and ImageNet-1k",
                    (89.22 - 88.33) / 88.33),
}
LEARNED = {"figure3": 0.9, "table1": 0.5}
"""Test accuracy below which a model has not learned its task (spiral: chance 0.5; digits: chance 0.1)."""
SIZES = {
    "smoke": {"n": 1024, "depth": 6, "width": 8, "epochs": 2, "table_epochs": 2, "channels": 4, "blocks": 2},
    "cpu": {"n": 16384, "depth": 32, "width": 32, "epochs": 6, "table_epochs": 15, "channels": 8, "blocks": 4},
}
MODES = {"Standard": "off", "Droppath": "droppath", "Ours": "residual_droppath"}


def _falls(distance: np.ndarray) -> int:
    """How many layers are closer to layer 0 than the layer before them."""
    to_first = distance[0, 1:]
    return int((np.diff(to_first) < 0).sum())


def measure_figure3(budget: str, seeds: int, store: RunStore, tick: Callable[[], None] = lambda: None) -> list[Result]:
    """Figure 3 (see the module docstring)."""
    claim = CLAIMS["figure3"]
    sizes = SIZES[budget]
    start = time.perf_counter()
    falls, falls_rdp, acc, commands, curves = [], [], [], [], {}
    for seed in range(seeds):
        for label, mode in (("standard", "off"), ("ResidualDroppath", "residual_droppath")):
            overrides = [f"data.n={sizes['n']}", f"model.depth={sizes['depth']}", f"model.width={sizes['width']}",
                         f"train.epochs={sizes['epochs']}", f"model.seed={seed}", f"train.seed={seed}",
                         f"train.droppath={mode}", f"train.drop_path_rate={0.1 if mode != 'off' else 0.0}"]
            run, line = train("spiral", overrides, store, f"fig3-{mode}-s{seed}")
            _, model, _, _ = load_trained(run)
            distance = similarity_snapshot(model.eval())["distance"]
            (falls if mode == "off" else falls_rdp).append(float(_falls(distance)))
            if mode == "off":
                acc.append(float(run.read_status()["metrics"]["test_acc"]))
            if seed == 0:
                commands.append(line)
                curves[label] = (list(range(1, len(distance))), distance[0, 1:].tolist())
            tick()
    figure = Curves("Distance of each layer's features to layer 0 (seed 0)", "layer", "distance", curves)
    unlearned = [] if mean(acc) >= LEARNED["figure3"] else \
        [f"the standard model reached {mean_sd(acc)} test accuracy on the spiral, not {LEARNED['figure3']:g}"]
    verdict = judge(falls, what="layers closer to layer 0 than the one before (standard training)",
                    preconditions=unlearned, smoke=budget == "smoke")
    return [Result(claim, {"standard": falls, "ResidualDroppath": falls_rdp, "test accuracy": acc},
                   f"{mean_sd(falls)} layers closer to layer 0 than the one before (ResidualDroppath: "
                   f"{mean_sd(falls_rdp)})", verdict, _scale(budget, "figure3"), commands,
                   time.perf_counter() - start, figure)]


def measure_table1(budget: str, seeds: int, store: RunStore, tick: Callable[[], None] = lambda: None) -> list[Result]:
    """Table 1 at toy scale (see the module docstring)."""
    claim = CLAIMS["table1"]
    sizes = SIZES[budget]
    start = time.perf_counter()
    acc: dict[str, list[float]] = {name: [] for name in MODES}
    commands = []
    for seed in range(seeds):
        for name, mode in MODES.items():
            overrides = ["model.name=conv_resnet", f"model.depths=[{sizes['blocks']}]",
                         f"model.channels=[{sizes['channels']}]", "model.feature_size=8",
                         f"train.epochs={sizes['table_epochs']}", f"train.droppath={mode}",
                         f"train.drop_path_rate={0.1 if mode != 'off' else 0.0}", f"model.seed={seed}",
                         f"train.seed={seed}"]
            run, line = train("ra_fc_digits", overrides, store, f"table1-{mode}-s{seed}")
            acc[name].append(float(run.read_status()["metrics"]["test_acc"]))
            if seed == 0:
                commands.append(line)
            tick()
    text = ", ".join(f"{name} {mean_sd(v, 4)}" for name, v in acc.items())
    smoke = budget == "smoke"
    unlearned = [f"{name} reached {mean_sd(v)} test accuracy, not {LEARNED['table1']:g}" for name, v in acc.items()
                 if not mean(v) >= LEARNED["table1"]]
    parts = [judge([o - b for o, b in zip(acc["Ours"], acc[other], strict=True)], what=f"Ours minus {other}",
                   target=claim.relative * mean(acc[other]), preconditions=unlearned, smoke=smoke)
             for other in ("Droppath", "Standard")]
    return [Result(claim, acc, text, combine(parts, "the highest mean accuracy"), _scale(budget, "table1"), commands,
                   time.perf_counter() - start)]


def _scale(budget: str, claim: str) -> str:
    """The lab's setting of ``claim`` at ``budget``."""
    s = SIZES[budget]
    if claim == "figure3":
        return (f"{s['depth']}-block, {s['width']}-wide residual MLP on a spiral of {s['n']} points, "
                f"{s['epochs']} epochs")
    return (f"conv ResNet of {s['blocks']} blocks × {s['channels']} channels on scikit-learn digits, "
            f"{s['table_epochs']} epochs")
