"""*ResidualDroppath: Enhancing Feature Reuse over Residual Connections*, reproduced at toy scale.

Two experiments:

- **Figure 3**: the paper's 32-layer, 32-wide residual MLP trained on its spiral; the Euclidean distance between
  every layer's features over the 50 × 50 input grid (:func:`lab.jobs.builders.similarity_snapshot`). The paper
  reads "similarity decreases and increases across multiple layers" off the heatmap: the distance to the first
  layer does not grow monotonically. Counted against a reference: the same seed's model at initialisation, whose
  random blocks move each layer further from the first, so what is judged is what training adds. The same model
  trained with ResidualDroppath (which the paper proposes to reduce such re-transformations) is drawn and counted
  beside it, as information.
- **Table 1 at toy scale**: a small convolutional ResNet on scikit-learn's digits, trained as Standard, Droppath
  (timm's stochastic depth) and Ours (ResidualDroppath, Algorithm 1), drop rate 0.1, over seeds, each difference
  against the paper's own for its MNIST ResNet50 row (:data:`TABLE1_ROWS`), capped by the headroom of the lab's
  accuracy.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from lab.jobs.builders import similarity_snapshot
from lab.reports.alignment import load_trained
from lab.reproduce.claims import Claim, Curves, Result, mean, mean_sd
from lab.reproduce.runs import train
from lab.reproduce.verdict import Floor, Target, Verdict, combine, judge
from lab.runs.store import RunStore
from lab.train.build import build_model

P = "droppath"
CLAIMS = {
    "figure3": Claim("droppath.figure3", P, "Figure 3", "feature similarity decreases and increases across "
                     "multiple layers: the model transforms the previous layer's feature distribution several times",
                     "qualitative (heatmap of a 32 × 32 MLP on the spiral)",
                     "layers l where the distance to layer 0 falls below that of layer l − 1, the trained standard "
                     "model minus the same model at initialisation (paired by seed); the ResidualDroppath model's "
                     "count beside it", "32-block, 32-wide residual MLP on the 2-D spiral, 1,000 epochs"),
    "table1": Claim("droppath.table1", P, "Table 1", "ResidualDroppath (Ours) gives the highest mean test accuracy, "
                    "above Droppath and Standard training", "MNIST ResNet50: 99.26 ± 0.05 Standard, 99.29 ± 0.03 "
                    "Droppath, 99.32 ± 0.05 Ours; CIFAR-10 ResNet50d: 89.55 ± 0.25, 89.84 ± 0.17, 90.84 ± 0.18 "
                    "(5 seeds); ImageNet-1k ResNet50d: 76.16, 76.49, 76.57 (one seed)",
                    "test accuracy, Ours minus Droppath and Ours minus Standard, paired by seed, drop rate 0.1, each "
                    "against the paper's own difference for that data set and model",
                    "ResNet50 and ResNet50d on MNIST, CIFAR-10 (5 seeds) and ImageNet-1k (one seed)"),
}
TABLE1_ROWS = {
    ("mnist", "ResNet50"): {"Standard": (99.26, 0.05), "Droppath": (99.29, 0.03), "Ours": (99.32, 0.05)},
    ("mnist", "ResNet50d"): {"Standard": (99.25, 0.07), "Droppath": (99.27, 0.02), "Ours": (99.32, 0.05)},
    ("cifar10", "ResNet50"): {"Standard": (88.07, 0.23), "Droppath": (88.33, 0.12), "Ours": (89.22, 0.16)},
    ("cifar10", "ResNet50d"): {"Standard": (89.55, 0.25), "Droppath": (89.84, 0.17), "Ours": (90.84, 0.18)},
    ("imagenet", "ResNet50"): {"Standard": (75.52, math.nan), "Droppath": (76.11, math.nan),
                               "Ours": (75.79, math.nan)},
    ("imagenet", "ResNet50d"): {"Standard": (76.16, math.nan), "Droppath": (76.49, math.nan),
                                "Ours": (76.57, math.nan)},
}
"""The paper's Table 1: top-1 test accuracy (%) as (mean, sd) over five seeds (ImageNet-1k: one seed, no sd)."""
TABLE1_CHANCE = {"digits": 0.1, "mnist": 0.1, "cifar10": 0.1, "imagenet": 0.001}
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


def figure3_verdict(values: dict[str, list[float]], smoke: bool = False) -> Verdict:
    """Figure 3's verdict from per-seed counts of falls: ``trained`` (standard training), ``initialisation`` (the same
    seed's model before training) and ``test accuracy`` (the trained model's)."""
    acc = values["test accuracy"]
    unlearned = [] if mean(acc) >= LEARNED["figure3"] else \
        [f"the standard model reached {mean_sd(acc)} test accuracy on the spiral, not {LEARNED['figure3']:g}"]
    return judge([t - i for t, i in zip(values["trained"], values["initialisation"], strict=True)],
                 what="layers closer to layer 0 than the one before, trained minus at initialisation",
                 preconditions=unlearned, smoke=smoke)


def measure_figure3(budget: str, seeds: int, store: RunStore, tick: Callable[[], None] = lambda: None) -> list[Result]:
    """Figure 3 (see the module docstring)."""
    claim = CLAIMS["figure3"]
    sizes = SIZES[budget]
    start = time.perf_counter()
    values: dict[str, list[float]] = {"trained": [], "initialisation": [], "ResidualDroppath": [],
                                      "test accuracy": []}
    commands, curves = [], {}
    for seed in range(seeds):
        for label, mode in (("standard", "off"), ("ResidualDroppath", "residual_droppath")):
            overrides = [f"data.n={sizes['n']}", f"model.depth={sizes['depth']}", f"model.width={sizes['width']}",
                         f"train.epochs={sizes['epochs']}", f"model.seed={seed}", f"train.seed={seed}",
                         f"train.droppath={mode}", f"train.drop_path_rate={0.1 if mode != 'off' else 0.0}"]
            run, line = train("spiral", overrides, store, f"fig3-{mode}-s{seed}")
            cfg, model, data, _ = load_trained(run)
            distance = similarity_snapshot(model.eval())["distance"]
            if mode == "off":
                values["trained"].append(float(_falls(distance)))
                values["test accuracy"].append(float(run.read_status()["metrics"]["test_acc"]))
                initial = similarity_snapshot(build_model(cfg, data).eval())["distance"]
                values["initialisation"].append(float(_falls(initial)))
                if seed == 0:
                    curves["at initialisation"] = (list(range(1, len(initial))), initial[0, 1:].tolist())
            else:
                values["ResidualDroppath"].append(float(_falls(distance)))
            if seed == 0:
                commands.append(line)
                curves[label] = (list(range(1, len(distance))), distance[0, 1:].tolist())
            tick()
    figure = Curves("Distance of each layer's features to layer 0 (seed 0)", "layer", "distance", curves)
    return [Result(claim, values, f"{mean_sd(values['trained'])} layers closer to layer 0 than the one before, "
                                  f"{mean_sd(values['initialisation'])} at initialisation (ResidualDroppath: "
                                  f"{mean_sd(values['ResidualDroppath'])})", figure3_verdict(values, budget == "smoke"),
                   _scale(budget, "figure3"), commands, time.perf_counter() - start, figure)]


def table1_verdict(acc: dict[str, dict[str, list[float]]], rows: dict[str, tuple[str, str]],
                   smoke: bool = False, paper_setting: bool = False) -> Verdict:
    """Table 1's verdict: per data set, Ours minus Droppath and Ours minus Standard, paired by seed, each beside the
    paper's own difference in the row of :data:`TABLE1_ROWS` that data set is compared with, with the other arm
    above chance + 0.1.

    Args:
        acc: per data set (``digits``, ``mnist``, …), per arm (``Standard``, ``Droppath``, ``Ours``), the test
            accuracy (a fraction) per seed.
        rows: per data set, the key of its paper row, ``(data set, model)``.
        smoke: judge nothing.
        paper_setting: the row's own data set and model trained as the paper's (the gpu budget): its difference,
            capped by the headroom of the lab's accuracy, is a rule; elsewhere (digits, shorter schedules) a note.
    """
    parts = []
    for name, arms in acc.items():
        row = rows[name]
        paper = TABLE1_ROWS[row]
        chance = TABLE1_CHANCE[name]
        for other in ("Droppath", "Standard"):
            points = (paper["Ours"][0] - paper[other][0]) / 100
            source = (f"Table 1, {row[0]} {row[1]}: Ours {paper['Ours'][0]:g} − {other} {paper[other][0]:g}")
            target = (Target.accuracy(points, source, arms[other]) if paper_setting else
                      Target.note(points * 100 / paper[other][0], arms[other], source))
            parts.append(judge([o - b for o, b in zip(arms["Ours"], arms[other], strict=True)],
                               what=f"{name}: Ours minus {other}", target=target, smoke=smoke,
                               floor=Floor(f"chance ({chance:g}) + 0.1", chance, tuple(arms[other]), 0.1)))
    return combine(parts, "the highest mean accuracy on every data set")


def measure_table1(budget: str, seeds: int, store: RunStore, tick: Callable[[], None] = lambda: None) -> list[Result]:
    """Table 1 at toy scale (see the module docstring): on digits, against the paper's MNIST ResNet50 row."""
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
    verdict = table1_verdict({"digits": acc}, {"digits": ("mnist", "ResNet50")}, budget == "smoke")
    return [Result(claim, acc, text, verdict, _scale(budget, "table1"), commands, time.perf_counter() - start)]


def _scale(budget: str, claim: str) -> str:
    """The lab's setting of ``claim`` at ``budget``."""
    s = SIZES[budget]
    if claim == "figure3":
        return (f"{s['depth']}-block, {s['width']}-wide residual MLP on a spiral of {s['n']} points, "
                f"{s['epochs']} epochs")
    return (f"conv ResNet of {s['blocks']} blocks × {s['channels']} channels on scikit-learn digits, "
            f"{s['table_epochs']} epochs")
