"""Power of the lab's extension of *Residual Alignment: Uncovering the Mechanisms of Residual Networks* to
Transformers at the cpu budget (``alignment.transformers``: RA1, RA2, RA3 and RA4 on a small ViT, RA1, RA2 and RA4 on
a small GPT-2), through its own rule (``ra_transformers.judged``) and Holm's adjustment over its family of its own
(``tests/reproduce/power.py``; the scenarios as in ``test_power_alignment.py``).

The paper has no Transformer, so every effect is the lab's own: each quantity is drawn per seed at the mean and
spread ``lab reproduce --budget cpu`` measured (:data:`MEASURED`), each claim's contrast a paired difference of the
trained network and the same network at initialisation. Where the lab's effect points against the paper (the ViT's
and the decoder's step lengths grow less even with training), the scenario "at the paper's effect" takes the same
size in the paper's direction, as the row's power does.
"""

import math

import numpy as np
import pytest

from lab.reproduce import EXPERIMENT_SEEDS
from lab.reproduce import ra_transformers as rt
from lab.reproduce.claims import Result
from lab.reproduce.verdict import JUDGED

from .power import POWERED, UNDERPOWERED, UNMEASURED, decides, simulate

SEEDS = EXPERIMENT_SEEDS["cpu"]["alignment.transformers"]
STEPS = 8
"""The cpu budget's Transformers: four layers, eight residual steps, RA4 fitted from step 4."""
ENTROPY = 2.7
"""The held-out text's byte entropy (nats), the decoder's bar."""
MEASURED = {
    "vit": {"straightness": (0.3896, 0.0179), "straightness gain": (0.1161, 0.0381), "cv": (0.4301, 0.0736),
            "cv gain": (-0.2659, 0.202), "baseline": (0.05, 0.0018), "over baseline": (0.2968, 0.025),
            "over init": (0.2447, 0.026), "slope": (-0.0698, 0.2849), "r2": (0.1399, 0.136),
            "r2 gain": (-0.1406, 0.2264), "topk": (1.4671, 0.0128), "log drop": (0.4129, 0.0907),
            "learned": (0.9168, 0.0273)},
    "gpt2": {"straightness": (0.4073, 0.0213), "straightness gain": (0.0826, 0.0298), "cv": (0.5654, 0.0568),
             "cv gain": (-0.0708, 0.085), "baseline": (0.0634, 0.0024), "over baseline": (0.0135, 0.0045),
             "over init": (0.0143, 0.0041), "slope": (0.0778, 0.0937), "r2": (0.1406, 0.127),
             "r2 gain": (0.1401, 0.1268), "learned": (0.4442, 0.0051)},
}
"""The lab's measured numbers at the cpu budget (``lab reproduce --budget cpu``'s 11 seeds; mean, sd over seeds): per
kind, the quantity at initialisation, and each paired contrast in the paper's direction (straightness trained minus
at initialisation; step-length CV at initialisation minus trained; alignment trained over the random bases and over
initialisation; the log spectral drop trained minus at initialisation; the slope of 1/σ₁ trained; its R² trained and
trained minus at initialisation), and how far it learned (the ViT's test accuracy, the decoder's held-out loss in nats
per byte)."""
CLAIMS = [c.id for c in rt.all_claims()]
EXPECT = {"alignment.ra1.transformers.vit": POWERED, "alignment.ra2.transformers.vit": POWERED,
          "alignment.ra3.transformers.vit": POWERED, "alignment.ra4.transformers.vit": UNMEASURED,
          "alignment.ra1.transformers.gpt2": UNDERPOWERED, "alignment.ra2.transformers.gpt2": POWERED,
          "alignment.ra4.transformers.gpt2": UNMEASURED}
"""What the cpu budget's seeds give each claim (``power.py``): RA4's 1/σ₁ is no line over steps that alternate
attention and MLP (mean R² 0.14, far below the floor 0.8); the decoder's step lengths grow slightly less even with
training (RA1's second part, −0.07 ± 0.09), which would need about 18 seeds."""


def _effect(m: tuple[float, float], scale: float) -> float:
    """The contrast's mean at ``scale``: its measured size in the paper's direction (see the module docstring)."""
    return scale * abs(m[0])


def _experiment(rng: np.random.Generator, kind: str, scale: dict[str, float]) -> list[Result]:
    """One experiment of ``kind`` through ``ra_transformers.judged``: its reports at initialisation and trained
    drawn from :data:`MEASURED`, each claim's contrasts times its scale."""
    m, n = MEASURED[kind], SEEDS
    s = {key: scale.get(f"alignment.{key}.transformers.{kind}", 1.0) for key in ("ra1", "ra2", "ra3", "ra4")}

    def draw(stat: tuple[float, float], mean: float | None = None) -> np.ndarray:
        return rng.normal(stat[0] if mean is None else mean, stat[1], n)

    straight = draw(m["straightness"])
    straight_trained = straight + draw(m["straightness gain"], _effect(m["straightness gain"], s["ra1"]))
    cv = draw(m["cv"])
    cv_trained = cv - draw(m["cv gain"], _effect(m["cv gain"], s["ra1"]))
    base = draw(m["baseline"])
    align = base + draw(m["over baseline"], _effect(m["over baseline"], s["ra2"]))
    align_init = align - draw(m["over init"], _effect(m["over init"], s["ra2"]))
    topk = draw(m.get("topk", (2.0, 0.1)))
    drop = draw(m.get("log drop", (0.0, 0.1)), _effect(m.get("log drop", (0.0, 0.1)), s["ra3"]))
    slope = draw(m["slope"], _effect(m["slope"], s["ra4"]))
    r2 = np.clip(draw(m["r2"]), 0.0, 1.0)
    r2_init = r2 - draw(m["r2 gain"], _effect(m["r2 gain"], s["ra4"]))
    blocks = list(np.arange(1.0, STEPS + 1))

    def report(k: int, trained: bool) -> dict:
        return {"straightness": (straight_trained if trained else straight)[k],
                "spacing_cv": (cv_trained if trained else cv)[k],
                "align_offdiag": (align if trained else align_init)[k], "baseline_mean": base[k],
                "topk_ratio": topk[k] * (math.exp(drop[k]) if trained else 1.0), "ra4_fit_from": 4, "ra4_fit_to": 8,
                "inv_sigma1_slope": slope[k] if trained else 0.0, "inv_sigma1_r2": (r2 if trained else r2_init)[k],
                "inv_sigma": blocks, "inv_sigma_fit": blocks}

    learned = draw(m["learned"]).tolist()
    return rt.judged(kind, [report(k, False) for k in range(n)], [report(k, True) for k in range(n)], learned, "",
                     [], 0.0, False, entropy=ENTROPY)


def family(rng: np.random.Generator, scales: dict[str, float]) -> list[Result]:
    return _experiment(rng, "vit", scales) + _experiment(rng, "gpt2", scales)


@pytest.fixture(scope="module")
def at_paper() -> dict:
    return simulate(family, {}, seed=500)


@pytest.mark.parametrize("claim", CLAIMS)
def test_power(claim, at_paper):
    decides(family, claim, at_paper, 501 + CLAIMS.index(claim), expect=EXPECT[claim])


def test_the_transformers_are_judged_apart_from_the_paper_and_its_other_extensions():
    """The claims on Transformers form a Holm family of their own: its size counts its own judged claims only."""
    verdicts = {claim: v[0] for claim, v in simulate(family, {}, seed=599, n=1).items()}
    judged = [v for v in verdicts.values() if v.verdict in JUDGED]
    assert 3 <= len(judged) <= 7 and {v.family for v in judged} == {len(judged)}
