"""*Residual Connections Harm Generative Representation Learning* on its own structure, at toy scale: the toy MAE.

The paper's claims about MAE features rest on its architecture (§3.2): the encoder's shortcuts decay, the decoder's
do not, and U-Net skips carry encoder states to the decoder, so the bottleneck may lose what only reconstruction
needs. ``configs/toy_mae_digits.yaml`` is that structure as a residual MLP on 8 × 8 digits (:mod:`lab.nn.mlp`:
8 encoder blocks, 4 decoder blocks at α = 1, U-Net skips from h_6, h_4 and h_2 as the authors' MAE injects h_L,
h_{L−2}, …, h_2; half of each digit's pixels hidden), 32 wide at cpu: a bottleneck narrower than its 64 pixels, so
that without the skips it cannot keep every pixel. One ``lab sweep`` per seed trains, as one ensemble, the encoder
decayed linearly to α_min = 1.0 … 0.5 and the two controls of Table 3b (√0.5 (x + f(x)) and x + √0.5 f(x)); one more
run per seed is Table 3a's "no U-Net" row (the same model without its skips) at α_min 0.6. Every member's
bottleneck — the encoder's output — is then measured on held-out digits: the paper's Eq. 6 rank, the full ridge
probe and, the lab's addition, a probe fitted on five digits of each class (the claims use it: on 8 × 8 digits the
full probe sits near its ceiling). Each probe is reported beside its floors: the raw pixels, and the same seed's
encoder at initialisation.

Claims measured: Table 3a (U-Net skips against none), Table 3b (the controls), Figure 6c (rank against probe across
α_min). The few-label probe is not the paper's full ImageNet probe: the paper's effects are notes, never a rule.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from lab.analysis.rank_sweep import member_features, pearson_r, sweep_rank_metrics
from lab.config import CONFIGS
from lab.reproduce.claims import Claim, Curves, Result, mean, mean_sd
from lab.reproduce.runs import ReproductionError, command, config, train
from lab.reproduce.verdict import Floor, Target, Verdict, combine, judge
from lab.runfolder.layout import Checkpoint, RunState
from lab.runs.store import Run, RunStore, config_of_run
from lab.sweeps import create_sweep, plan_sweep, train_sweep
from lab.train.build import build_data, build_model, build_task

P = "decayed"
CONFIG = "toy_mae_digits"
PAPER_SCALE = "MAE ViT-B/16 with U-Net skips, ImageNet-100, 800 epochs; probe of the encoder's class token"
CLAIMS = {
    "unet": Claim("decayed.unet", P, "Table 3a", "without skip connections between encoder and decoder, the bottleneck "
                  "must preserve all information to reconstruct the input, and the representation degrades",
                  "probe 83.6 with U-Net skips, 61.5 without (α_min 0.6)",
                  "few-label probe of the toy MAE's bottleneck at α_min 0.6, with U-Net skips minus without",
                  PAPER_SCALE, (83.6 - 61.5) / 61.5),
    "controls": Claim("decayed.controls", P, "Table 3b", "scaling both branches by √0.5 helps less than the decayed "
                      "shortcut, and scaling the residual branch alone does not help",
                      "probe 76.5 standard, 76.9 x + √0.5 f(x), 82.6 √0.5 (x + f(x)), 83.6 decayed α_min 0.6",
                      "few-label probe of the toy MAE's bottleneck: decayed (α_min 0.6) minus √0.5 (x + f(x)), and "
                      "decayed minus x + √0.5 f(x)", PAPER_SCALE, (83.6 - 82.6) / 82.6),
    "correlation": Claim("decayed.rank_probe", P, "Figure 6c", "feature rank and linear-probe accuracy are negatively "
                         "correlated across α_min", "Pearson r −0.42 … −0.58 over epochs 200–800 (MAE, ImageNet-100)",
                         "Pearson r across the α_min sweep (1.0 … 0.5) of the bottleneck's Eq. 6 rank against its "
                         "few-label probe accuracy (the claim's effect: −r)", PAPER_SCALE),
}
SIZES = {
    "smoke": {"alphas": [1.0, 0.6], "epochs": 1, "width": 16, "depth": 4, "decoder": 2, "points": 200},
    "cpu": {"alphas": [1.0, 0.9, 0.8, 0.7, 0.6, 0.5], "epochs": 40, "width": 32, "depth": 8, "decoder": 4,
            "points": 360},
}
CHANCE = 0.1
"""A probe of ten digits at chance."""
FLOOR_MARGIN, CEILING = 0.1, 0.99
"""A probe must lie this far above chance, and below this ceiling, to tell features apart."""


def scale(budget: str) -> str:
    """The lab's setting at ``budget``."""
    s = SIZES[budget]
    return (f"toy MAE: residual MLP of {s['depth']} encoder + {s['decoder']} decoder blocks × {s['width']} (the "
            "bottleneck's width, for 64 pixels) with U-Net skips, scikit-learn digits (1,437 training images of "
            f"8 × 8, half the pixels hidden), {s['epochs']} epochs")


def _sweep(overrides: list[str], store: RunStore, points: int) -> tuple[list[dict], str]:
    """Train a sweep of the toy MAE; each member's settings and its bottleneck's measures on held-out digits."""
    plan = plan_sweep(CONFIGS / f"{CONFIG}.yaml", overrides)
    folder, runs = create_sweep(plan, store)
    statuses = train_sweep(plan, folder, runs, progress=False)
    bad = [f"{r.id}: {s['state']}" for r, s in zip(runs, statuses, strict=True) if s["state"] != RunState.COMPLETED]
    if bad:
        raise ReproductionError("sweep members did not complete: " + "; ".join(bad))
    return _measured(runs, statuses, [m.values for m in plan.members], points), \
        command("sweep", f"configs/{CONFIG}.yaml", *overrides)


def _single(overrides: list[str], store: RunStore, points: int, name: str) -> tuple[dict, str]:
    """Train one toy MAE (``lab train``) and measure its bottleneck as :func:`_sweep` measures a member's."""
    run, line = train(CONFIG, overrides, store, name)
    return _measured([run], [run.read_status()], [{}], points)[0], line


def _bottleneck(features: torch.Tensor, data, n: int, layer: int) -> dict[str, np.ndarray]:
    """Rank and probes of ``features [K, L+1, train + n, H]`` (training digits, then the first n held-out ones)."""
    t = len(data.x_train)
    return sweep_rank_metrics(features[:, :, :t], data.y_train, features[:, :, t:], data.y_test[:n],
                              num_classes=data.num_classes, layer=layer, few_labels=True)


def _measured(runs: list[Run], statuses: list[dict], settings: list[dict], points: int) -> list[dict]:
    """Each run's settings and its bottleneck's Eq. 6 rank, full probe and few-label probe on held-out digits."""
    cfg = config_of_run(runs[0])
    data = build_data(cfg)
    task = build_task(cfg, data)
    models = []
    for run in runs:
        model = build_model(config_of_run(run), data)
        model.load_state_dict(run.load_checkpoint(Checkpoint.LAST)["model"])
        models.append(model.eval())
    n = min(points, len(data.x_test))
    layer = models[0].representation
    metrics = _bottleneck(member_features(models, task.probe_inputs(torch.cat([data.x_train, data.x_test[:n]]))),
                          data, n, layer)
    return [{**values, "rank": float(metrics["eq6_entropy"][k, layer]), "probe": float(metrics["probe_acc"][k, layer]),
             "probe_few": float(metrics["probe_few"][k]), "test_loss": statuses[k]["metrics"].get("test_loss"),
             "rank_by_layer": metrics["eq6_entropy"][k].tolist()} for k, values in enumerate(settings)]


def _floors(overrides: list[str], points: int) -> dict[str, float]:
    """The probes' floors on the same digits: the raw pixels, and the encoder of ``overrides`` (its seed) at
    initialisation."""
    cfg = config(CONFIG, overrides)
    data = build_data(cfg)
    task = build_task(cfg, data)
    n = min(points, len(data.x_test))
    x = torch.cat([data.x_train, data.x_test[:n]])
    raw = _bottleneck(x.flatten(1)[None, None], data, n, 0)
    model = build_model(cfg, data).eval()
    initial = _bottleneck(member_features([model], task.probe_inputs(x)), data, n, model.representation)
    return {"raw pixels: full probe": float(raw["probe_acc"][0, 0]), "raw pixels: few-label probe":
            float(raw["probe_few"][0]), "encoder at initialisation: full probe":
            float(initial["probe_acc"][0, model.representation]),
            "encoder at initialisation: few-label probe": float(initial["probe_few"][0])}


TABLE3 = {"unet": "Table 3a, ViT-B/16 on ImageNet-100 at α_min 0.6: 83.6 with U-Net skips − 61.5 without",
          "scaled_both": "Table 3b: decayed 83.6 − √0.5 (x + f(x)) 82.6",
          "scaled_branch": "Table 3b: decayed 83.6 − x + √0.5 f(x) 76.9"}
"""The paper's numbers the claims are noted against."""


def _probe_ok(few: list[float], name: str) -> list[str]:
    return [f"the few-label probe of {name} is at its ceiling ({mean_sd(few)})"] if mean(few) >= CEILING else []


def _floor(few: list[float]) -> Floor:
    return Floor(f"chance (1/10) + {FLOOR_MARGIN:g}", CHANCE, tuple(few), FLOOR_MARGIN)


def _diff(a: list[float], b: list[float]) -> list[float]:
    return [x - y for x, y in zip(a, b, strict=True)]


def unet_verdict(with_skips: list[float], without: list[float], smoke: bool = False) -> Verdict:
    """Table 3a's verdict from per-seed few-label probes of the bottleneck with and without U-Net skips (α_min 0.6):
    their paired difference; the paper's effect is a note (its probe is not this one)."""
    return judge(_diff(with_skips, without), what="few-label probe, U-Net skips minus none",
                 target=Target.note(CLAIMS["unet"].relative, without, TABLE3["unet"]), floor=_floor(without),
                 preconditions=[*_probe_ok(with_skips, "α_min 0.6"), *_probe_ok(without, "no U-Net")], smoke=smoke)


def controls_verdict(decayed: list[float], controls: dict[str, list[float]], smoke: bool = False) -> Verdict:
    """Table 3b's verdict from per-seed few-label probes: the decayed model (α_min 0.6) above each control
    (``scaled_both``, ``scaled_branch``), paired by seed; the paper's effects are notes."""
    relative = {"scaled_both": (83.6 - 82.6) / 82.6, "scaled_branch": (83.6 - 76.9) / 76.9}
    labels = {"scaled_both": "√0.5 (x + f(x))", "scaled_branch": "x + √0.5 f(x)"}
    parts = [judge(_diff(decayed, controls[other]), what=f"few-label probe, decayed α_min 0.6 minus {labels[other]}",
                   target=Target.note(relative[other], controls[other], TABLE3[other]), floor=_floor(controls[other]),
                   preconditions=[*_probe_ok(decayed, "α_min 0.6"), *_probe_ok(controls[other], labels[other])],
                   smoke=smoke)
             for other in ("scaled_both", "scaled_branch")]
    return combine(parts, "decayed above both controls")


def correlation_verdict(r_values: list[float], base_few: list[float], smoke: bool = False) -> Verdict:
    """Figure 6c's verdict: −r per seed (r: Pearson's, of rank against few-label probe across α_min), with the
    α_min 1.0 probe above chance + 0.1."""
    return judge([-r for r in r_values], what="−Pearson r of Eq. 6 rank and few-label probe", floor=_floor(base_few),
                 smoke=smoke)


def measure(budget: str, seeds: int, store: RunStore, tick: Callable[[], None] = lambda: None) -> list[Result]:
    """Table 3a, Table 3b and Figure 6c on the toy MAE (see the module docstring)."""
    s, smoke = SIZES[budget], budget == "smoke"
    start = time.perf_counter()
    size = [f"model.width={s['width']}", f"model.depth={s['depth']}", f"model.decoder_depth={s['decoder']}",
            f"train.epochs={s['epochs']}"]
    arms: dict[str, list[dict]] = {}
    floors: dict[str, list[float]] = {}
    r_values, commands, first = [], [], None
    for seed in range(seeds):
        seeded = [*size, f"model.seed={seed}", f"train.seed={seed}", f"name=toy-mae-s{seed}"]
        alphas = ",".join(f"{a:g}" for a in s["alphas"])
        members, line = _sweep([*seeded, f"model.alpha_min={alphas}"], store, s["points"])
        controls, ctrl_line = _sweep([*seeded, "model.shortcut=scaled_both,scaled_branch"], store, s["points"])
        single = [*size, f"model.seed={seed}", f"train.seed={seed}", "model.alpha_min=0.6"]
        plain, plain_line = _single([*single, "model.unet_skips=false"], store, s["points"], f"toy-mae-no-unet-s{seed}")
        for key, value in _floors(single, s["points"]).items():
            floors.setdefault(key, []).append(value)
        tick()
        for m in members:
            arms.setdefault(f"α_min {m['model.alpha_min']:g}", []).append(m)
        for m in controls:
            arms.setdefault(m["model.shortcut"], []).append(m)
        arms.setdefault("no U-Net, α_min 0.6", []).append(plain)
        r_values.append(pearson_r(np.array([m["rank"] for m in members]), np.array([m["probe_few"] for m in members])))
        if seed == 0:
            commands, first = [line, ctrl_line, plain_line], members
    seconds = time.perf_counter() - start

    def per_seed(arm: str, key: str) -> list[float]:
        return [float(m[key]) if m[key] is not None else float("nan") for m in arms[arm]]

    few = {arm: per_seed(arm, "probe_few") for arm in arms}
    full = {arm: per_seed(arm, "probe") for arm in arms}
    values = {f"{arm}: {what}": per_seed(arm, key) for arm in arms
              for what, key in (("few-label probe", "probe_few"), ("full probe", "probe"), ("Eq. 6 rank", "rank"),
                                ("held-out loss", "test_loss"))}
    values |= {f"floor, {key}": v for key, v in floors.items()}
    decayed, plain = "α_min 0.6", "no U-Net, α_min 0.6"
    setting = scale(budget)
    layers = list(range(len(first[0]["rank_by_layer"])))
    figure = Curves("Eq. 6 rank of the toy MAE by depth (seed 0; the bottleneck is the encoder's last state)",
                    "depth", "Eq. 6 entropy", {f"α_min = {m['model.alpha_min']:g}": (layers, m["rank_by_layer"])
                                               for m in first})
    floor_text = (f"floors: raw pixels {mean_sd(floors['raw pixels: full probe'])} full, "
                  f"{mean_sd(floors['raw pixels: few-label probe'])} few-label; encoder at initialisation "
                  f"{mean_sd(floors['encoder at initialisation: full probe'])} full, "
                  f"{mean_sd(floors['encoder at initialisation: few-label probe'])} few-label")
    text = "; ".join(f"{arm}: {mean_sd(few[arm])} (full {mean_sd(full[arm])})" for arm in arms) + f"; {floor_text}"
    loss = {arm: per_seed(arm, "test_loss") for arm in (decayed, plain)}
    out = [Result(CLAIMS["unet"], values,
                  f"few-label probe {mean_sd(few[decayed])} with U-Net skips, {mean_sd(few[plain])} without (full "
                  f"probe {mean_sd(full[decayed])} and {mean_sd(full[plain])}; held-out loss {mean_sd(loss[decayed])} "
                  f"and {mean_sd(loss[plain])}; bottleneck rank {mean_sd(per_seed(decayed, 'rank'))} and "
                  f"{mean_sd(per_seed(plain, 'rank'))}); {floor_text}",
                  unet_verdict(few[decayed], few[plain], smoke), setting, commands, seconds)]
    out.append(Result(CLAIMS["controls"], values, text,
                      controls_verdict(few[decayed], {k: few[k] for k in ("scaled_both", "scaled_branch")}, smoke),
                      setting, commands, seconds, figure))
    out.append(Result(CLAIMS["correlation"], {"pearson r": r_values, **values}, f"r = {mean_sd(r_values)} across "
                      f"α_min {', '.join(f'{a:g}' for a in s['alphas'])}",
                      correlation_verdict(r_values, few[f"α_min {s['alphas'][0]:g}"], smoke), setting, commands,
                      seconds))
    return out
