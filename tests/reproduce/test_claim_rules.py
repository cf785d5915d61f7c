"""Every claim rule of ``lab reproduce``, checked by simulation against its error rates.

For each rule, two checks over 1,000 simulated experiments at the budget's seeds:

(a) with the paper's own effect as the truth (its reported means and spreads; where it gives none, its effect at a
    seed noise stated in the test), the rule reads "differs" in at most :data:`BOUND`: the engine promises 2.5 %
    (the interval lies below the paper's reach one time in forty), and 5 % plus two binomial standard errors is the
    most a fair rule can show in 1,000 experiments;
(b) with no effect (both arms from the same distribution), it reads "holds" in at most the same bound (5 %).

Each check prints its rates (``pytest -s``). The generators' seeds are fixed: a rule whose "holds" is exactly 5 %
(the t-test under Gaussian noise) still exceeds the two-standard-error bound for about one seed in fifty.
"""

import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from lab.reproduce import alignment, decayed, droppath, toy_mae
from lab.reproduce.claims import Result, adjust_for_multiplicity
from lab.reproduce.verdict import Verdict, judge

N = 1000
"""Simulated experiments per check."""
BOUND = 0.05 + 2 * math.sqrt(0.05 * 0.95 / N)
"""At most this share of experiments may read "differs" at the paper's numbers, or "holds" with no effect."""
SEEDS = 3
"""The cpu budget's seeds (Table 1: 5, as the paper)."""


def _share(verdicts: list[Verdict], name: str) -> float:
    return float(np.mean([v.verdict == name for v in verdicts]))


def _simulate(experiment: Callable[[], object]) -> list:
    return [experiment() for _ in range(N)]


def _check(label: str, at_paper: list[Verdict], at_null: list[Verdict], *,
           measurable: bool = True) -> tuple[list[Verdict], list[Verdict]]:
    """Given N experiments at the paper's numbers and N with no effect, assert both error rates are within
    :data:`BOUND` and (``measurable``) that most experiments were judged (a rule that is "not measurable" everywhere
    would pass vacuously)."""
    assert len(at_paper) == len(at_null) == N
    differs, holds = _share(at_paper, "differs"), _share(at_null, "holds")
    unmeasured = _share(at_paper, "not measurable"), _share(at_null, "not measurable")
    print(f"\n{label}: differs at the paper's numbers {differs:.3f} (holds {_share(at_paper, 'holds'):.3f}, not "
          f"measurable {unmeasured[0]:.3f}); holds with no effect {holds:.3f} (not measurable {unmeasured[1]:.3f})")
    assert differs <= BOUND, f"{label}: 'differs' in {differs:.3f} of experiments at the paper's own numbers"
    assert holds <= BOUND, f"{label}: 'holds' in {holds:.3f} of experiments with no effect"
    if measurable:
        assert max(unmeasured) < 0.5, f"{label}: mostly not measurable {unmeasured}: the check would be vacuous"
    return at_paper, at_null


def _normal(rng: np.random.Generator, mean: float, sd: float, n: int = SEEDS) -> list[float]:
    return rng.normal(mean, sd, n).tolist()


# -- ResidualDroppath ----------------------------------------------------------------------------------------------

IMAGENET_SD = 0.1
"""ImageNet-1k has one seed in the paper (no sd): its arms are simulated with this seed noise (points)."""


def _table1_arms(rng: np.random.Generator, row: tuple[str, str], seeds: int, null: bool) -> dict[str, list[float]]:
    """Per arm, per seed, a test accuracy (fraction) drawn from the paper's mean and sd of that arm (``null``: every
    arm from the Droppath arm's)."""
    paper = droppath.TABLE1_ROWS[row]
    out = {}
    for arm in ("Standard", "Droppath", "Ours"):
        mean, sd = paper["Droppath" if null else arm]
        out[arm] = _normal(rng, mean / 100, (sd if math.isfinite(sd) else IMAGENET_SD) / 100, seeds)
    return out


def _old_table1_differs(ours: np.ndarray, droppath_arm: np.ndarray) -> np.ndarray:
    """The rule the engine replaced, on Ours − Droppath per experiment (rows): "holds" if p < 0.05; else "differs" if
    significantly the other way, or if the 95 % t-interval's upper end lies below the target — CIFAR-10's relative
    effect, (89.22 − 88.33) / 88.33, times the Droppath arm's mean, whatever the data set."""
    d = ours - droppath_arm
    n = d.shape[1]
    mean, se = d.mean(axis=1), d.std(axis=1, ddof=1) / math.sqrt(n)
    t = mean / se
    holds = stats.t.sf(t, n - 1) < 0.05
    other = stats.t.cdf(t, n - 1) < 0.05
    target = (89.22 - 88.33) / 88.33 * droppath_arm.mean(axis=1)
    upper = mean + stats.t.ppf(0.975, n - 1) * se
    return ~holds & (other | (upper < target))


def test_table1_at_the_cpu_budget():
    """Table 1, MNIST ResNet50 (the row the cpu budget's digits are noted beside: not its setting), 5 seeds: Standard
    99.26 ± 0.05, Droppath 99.29 ± 0.03, Ours 99.32 ± 0.05. Null: every arm 99.29 ± 0.03.

    The old rule, for contrast: it held MNIST's 0.03-point gain to CIFAR-10's relative effect (about 1 point of
    accuracy), so at the paper's own MNIST numbers it read "differs" in most experiments (the issue: 74–86 %)."""
    rng = np.random.default_rng(11)
    rows = {"digits": ("mnist", "ResNet50")}
    paper = droppath.TABLE1_ROWS[rows["digits"]]
    arms = {arm: rng.normal(paper[arm][0] / 100, paper[arm][1] / 100, (N, 5)) for arm in paper}
    at_paper = [droppath.table1_verdict({"digits": {arm: v[i].tolist() for arm, v in arms.items()}}, rows)
                for i in range(N)]
    null = _simulate(lambda: droppath.table1_verdict({"digits": _table1_arms(rng, rows["digits"], 5, True)}, rows))
    verdicts, _ = _check("Table 1, cpu (digits against MNIST ResNet50, 5 seeds)", at_paper, null)
    old = float(np.mean(_old_table1_differs(arms["Ours"], arms["Droppath"])))
    print(f"old Table 1 rule, Ours − Droppath at the paper's MNIST numbers: differs {old:.3f} (new rule, both "
          f"differences: {_share(verdicts, 'differs'):.3f})")
    assert old > 0.5


def test_table1_at_full_scale():
    """Table 1 as the gpu budget judges it, 5 seeds per data set, each against its own row: MNIST ResNet50 (99.26 ±
    0.05, 99.29 ± 0.03, 99.32 ± 0.05) and CIFAR-10 ResNet50d (89.55 ± 0.25, 89.84 ± 0.17, 90.84 ± 0.18). ImageNet-1k
    (76.16, 76.49, 76.57 from one seed, no spread) is left out of the simulation (it would only add a stated noise);
    its row is checked once, at a stated seed noise of 0.1 points."""
    rng = np.random.default_rng(12)
    rows = {"mnist": ("mnist", "ResNet50"), "cifar10": ("cifar10", "ResNet50d")}

    def run(null: bool) -> Verdict:
        return droppath.table1_verdict({name: _table1_arms(rng, row, 5, null) for name, row in rows.items()}, rows,
                                       paper_setting=True)

    _check("Table 1, gpu (MNIST, CIFAR-10, 5 seeds)", _simulate(lambda: run(False)), _simulate(lambda: run(True)))
    imagenet = {"imagenet": ("imagenet", "ResNet50d")}
    once = droppath.table1_verdict({"imagenet": _table1_arms(rng, imagenet["imagenet"], 5, False)}, imagenet,
                                   paper_setting=True)
    assert once.verdict in ("holds", "inconclusive") and len(once.parts) == 2
    assert once.parts[0].target.value == pytest.approx((76.57 - 76.49) / 100) and once.parts[0].target.same_metric


def test_figure3():
    """Figure 3 gives no numbers (a heatmap): the stated truth is that a trained 32-block MLP has round(N(6, 2))
    layers closer to layer 0 than the one before, against round(N(1, 1)) (at least 0) at initialisation, with test
    accuracy 0.99; 3 seeds. Null: both counts round(N(6, 2)), at least 0."""
    rng = np.random.default_rng(13)

    def counts(mean: float, sd: float) -> list[float]:
        return np.maximum(0.0, np.round(rng.normal(mean, sd, SEEDS))).tolist()

    def run(trained: tuple[float, float], initial: tuple[float, float]) -> Verdict:
        return droppath.figure3_verdict({"trained": counts(*trained), "initialisation": counts(*initial),
                                         "test accuracy": [0.99] * SEEDS})

    _check("Figure 3 (3 seeds)", _simulate(lambda: run((6, 2), (1, 1))), _simulate(lambda: run((6, 2), (6, 2))))


# -- Residual connections harm generative representation learning -----------------------------------------------------

PROBE_SD = 0.02
"""Stated seed noise of a probe's accuracy (the lab's toy probes; the papers give none)."""


def test_mae_probe():
    """Table 2: +7.1 points, 76.5 at α_min 1.0 → 83.6 at 0.6 (no spread given: a stated seed noise of 2 points per
    arm), 3 seeds. Two baselines: 0.80, where the full effect fits below the ceiling, and 0.93 (about the lab's cpu
    probe), where it does not: the α_min 0.6 probe is base + 0.071 + noise, capped at 1.0 (then mostly at the rule's
    0.99 ceiling, "not measurable"). Null: both arms from the base's distribution."""
    rng = np.random.default_rng(24)

    def run(base_mean: float, effect: float) -> Verdict:
        base = rng.normal(base_mean, PROBE_SD, SEEDS)
        if effect:
            other = np.minimum(1.0, base + effect + rng.normal(0.0, PROBE_SD, SEEDS))
        else:
            other = rng.normal(base_mean, PROBE_SD, SEEDS)
        return decayed.mae_verdict(base.tolist(), other.tolist(), paper_setting=paper_setting)

    for paper_setting in (True, False):  # the gpu budget's rule; the toy MAE's note
        label = f"Table 2 ({'rule' if paper_setting else 'note'})"
        _check(f"{label}, base 0.80", _simulate(lambda: run(0.80, 0.071)), _simulate(lambda: run(0.80, 0.0)))
        at_paper, _ = _check(f"{label}, base 0.93 (effect capped at 1.0)", _simulate(lambda: run(0.93, 0.071)),
                             _simulate(lambda: run(0.93, 0.0)), measurable=False)
        assert _share(at_paper, "not measurable") > 0.5  # at the ceiling: the rule cannot tell, and says so


def test_diffusion_with_digits_fd():
    """Table 4 at the cpu budget: digits-FD is not the paper's FID, so its effect is a note. Paper: FID 14.34 at α_min
    1.0 → 8.99 at 0.7 (−37 %), probe 62.47 → 66.86 (+7 %). Stated truth: digits-FD N(80, 5) → N(80 × 8.99 / 14.34,
    5) (below 150: the samples are digits), deepest-block probe N(0.60, 0.02) → N(0.60 × 66.86 / 62.47, 0.02);
    3 seeds. Null: the α_min 0.7 arms from the 1.0 arms' distributions."""
    rng = np.random.default_rng(15)

    def run(null: bool) -> tuple[Verdict, Verdict]:
        fd, probe = (1.0, 1.0) if null else (8.99 / 14.34, 66.86 / 62.47)
        fds = {1.0: _normal(rng, 80, 5), 0.7: _normal(rng, 80 * fd, 5)}
        deep = {1.0: _normal(rng, 0.60, PROBE_SD), 0.7: _normal(rng, 0.60 * probe, PROBE_SD)}
        return decayed.diffusion_verdicts(fds, deep, digits_fd=True)

    pairs = [(run(False), run(True)) for _ in range(N)]
    for k, label in enumerate(("Table 4 digits-FD (note)", "Table 4 deepest-block probe (note)")):
        _check(f"{label}, cpu", [p[k] for p, _ in pairs], [q[k] for _, q in pairs])
    not_digits = decayed.diffusion_verdicts({1.0: [200.0] * 3, 0.7: [80.0] * 3}, {1.0: [0.6] * 3, 0.7: [0.6] * 3},
                                            digits_fd=True)[0]
    assert not_digits.verdict == "not measurable" and "not yet digits" in not_digits.reason


FID_SD = 2.0
"""Stated seed noise of a U-ViT's FID (the paper gives none): large enough that "holds" is not certain, so that the
rule against the paper's 5.35 is put to the test."""


def test_diffusion_with_fid():
    """Table 4 at full scale: FID is the paper's metric, so its 5.35 lower (14.34 → 8.99) is a rule, capped by the
    FID at α_min 1.0; stated FID seed noise :data:`FID_SD`. The probe 62.47 → 66.86 with seed noise 1 point (a note:
    the deepest blocks are not the paper's best cell), chance 0.01 (CIFAR-100); 3 seeds. Null: the α_min 0.7 arms
    from the 1.0 arms' distributions."""
    rng = np.random.default_rng(16)

    def run(null: bool) -> tuple[Verdict, Verdict]:
        fid, probe = (14.34, 0.6247) if null else (8.99, 0.6686)
        return decayed.diffusion_verdicts({1.0: _normal(rng, 14.34, FID_SD), 0.7: _normal(rng, fid, FID_SD)},
                                          {1.0: _normal(rng, 0.6247, 0.01), 0.7: _normal(rng, probe, 0.01)},
                                          digits_fd=False, paper_setting=True, chance=0.01, margin=0.05)

    pairs = [(run(False), run(True)) for _ in range(N)]
    for k, label in enumerate(("Table 4 FID (rule)", "Table 4 deepest-block probe (note)")):
        _check(f"{label}, gpu", [p[k] for p, _ in pairs], [q[k] for _, q in pairs])
    fid = pairs[0][0][0]
    assert fid.target.same_metric and fid.target.reach == pytest.approx(14.34 - 8.99)


def test_unet():
    """Table 3a: probe 83.6 with U-Net skips, 61.5 without (α_min 0.6): a note (the toy few-label probe is not the
    paper's). Two truths, 3 seeds, probe seed noise 0.02: the paper's ratio at the lab's level (0.83 with, 0.83 × 61.5
    / 83.6 without), and the ceiling-capped best for a lab baseline of 0.84 (with skips N(0.95, 0.01)). Null: both
    arms N(0.83, 0.02).

    The old rule, for contrast: its target, (83.6 − 61.5) / 61.5 × mean(without) ≈ 0.30 at 0.84, would need a probe
    above 1.1 with skips; its "the interval excludes the paper's effect" fired in every experiment, even at the
    ceiling, so any experiment it did not call "holds" it called "differs"."""
    rng = np.random.default_rng(17)

    def run(with_: tuple[float, float], without: tuple[float, float]) -> Verdict:
        return toy_mae.unet_verdict(_normal(rng, *with_), _normal(rng, *without))

    null = (0.83, PROBE_SD)
    _check("Table 3a (note), paper's ratio", _simulate(lambda: run((0.83, PROBE_SD), (0.83 * 61.5 / 83.6, PROBE_SD))),
           _simulate(lambda: run(null, null)))
    capped, _ = _check("Table 3a (note), ceiling-capped", _simulate(lambda: run((0.95, 0.01), (0.84, PROBE_SD))),
                       _simulate(lambda: run(null, null)))
    relative = toy_mae.CLAIMS["unet"].relative
    assert relative == pytest.approx((83.6 - 61.5) / 61.5)
    ruled_out = []
    for v in capped:
        without = v.floor.values
        old_target = relative * float(np.mean(without))
        ruled_out.append(v.stats.ci95[1] < old_target)
    old = float(np.mean(ruled_out))
    print(f"old Table 3a rule at the ceiling-capped truth: the interval excludes its target in {old:.3f} "
          f"(new rule differs {_share(capped, 'differs'):.3f})")
    assert old > 0.9 and _share(capped, "differs") <= BOUND


def test_controls():
    """Table 3b: decayed 83.6, √0.5 (x + f(x)) 82.6, x + √0.5 f(x) 76.9: notes. Stated truth at the lab's level:
    decayed N(0.83, 0.02), the controls N(0.83 × 82.6 / 83.6, 0.02) and N(0.83 × 76.9 / 83.6, 0.02); 3 seeds. Null:
    all three N(0.83, 0.02)."""
    rng = np.random.default_rng(18)

    def run(both: float, branch: float) -> Verdict:
        return toy_mae.controls_verdict(_normal(rng, 0.83, PROBE_SD), {"scaled_both": _normal(rng, both, PROBE_SD),
                                                                       "scaled_branch": _normal(rng, branch, PROBE_SD)})

    _check("Table 3b (notes)", _simulate(lambda: run(0.83 * 82.6 / 83.6, 0.83 * 76.9 / 83.6)),
           _simulate(lambda: run(0.83, 0.83)))


def _null_pearson(rng: np.random.Generator, points: int = 6) -> list[float]:
    """Per seed, Pearson's r of two unrelated variables over ``points`` α_min values: its exact null."""
    x, y = rng.normal(size=(2, SEEDS, points))
    x, y = x - x.mean(axis=1, keepdims=True), y - y.mean(axis=1, keepdims=True)
    return ((x * y).sum(axis=1) / np.sqrt((x * x).sum(axis=1) * (y * y).sum(axis=1))).tolist()


def test_rank_probe_correlation():
    """Figure 6c: r between −0.42 and −0.58 over epochs 200–800. Stated truth: r per seed clip(N(−0.5, 0.2), −1, 1),
    the α_min 1.0 probe N(0.80, 0.02); 3 seeds. Null: r of rank and probe unrelated across the 6 α_min values."""
    rng = np.random.default_rng(19)

    def run(r: list[float]) -> Verdict:
        return toy_mae.correlation_verdict(r, _normal(rng, 0.80, PROBE_SD))

    _check("Figure 6c", _simulate(lambda: run(np.clip(rng.normal(-0.5, 0.2, SEEDS), -1, 1).tolist())),
           _simulate(lambda: run(_null_pearson(rng))))


def test_rank():
    """Figure 9: the rank falls with α_min at 8 and 16 blocks and over training; the paper gives no ρ. Stated truth:
    Spearman ρ per seed clip(N(0.7, 0.2), −1, 1) at each depth and over training, 18 members per depth, none
    dropped; 3 seeds. Null: ρ clip(N(0, 0.4), −1, 1). A depth that loses 7 of its 18 members (more than a third) is
    not measurable; 6 is not too many."""
    rng = np.random.default_rng(20)
    members, none = {8: 18, 16: 18}, {8: [], 16: []}

    def run(mean: float, sd: float) -> Verdict:
        rho = {d: np.clip(rng.normal(mean, sd, SEEDS), -1, 1).tolist() for d in (8, 16)}
        return decayed.rank_verdict(rho, np.clip(rng.normal(mean, sd, SEEDS), -1, 1).tolist(), none, members, [8, 16])

    _check("Figure 9", _simulate(lambda: run(0.7, 0.2)), _simulate(lambda: run(0.0, 0.4)))
    rho, training = {8: [0.7, 0.8, 0.6], 16: [0.7, 0.8, 0.6]}, [0.7, 0.8, 0.6]
    assert decayed.rank_verdict(rho, training, none, members, [8, 16]).verdict == "holds"
    seven = {8: [], 16: [f"member {k}" for k in range(7)]}
    lost = decayed.rank_verdict(rho, training, seven, members, [8, 16])
    assert lost.verdict == "not measurable" and "7 of 18 members at 16 blocks" in lost.reason
    six = {8: [], 16: [f"member {k}" for k in range(6)]}
    assert decayed.rank_verdict(rho, training, six, members, [8, 16]).verdict == "holds"


# -- Residual alignment ------------------------------------------------------------------------------------------------

def _ra4_draws(rng: np.random.Generator, null: bool) -> tuple[list[float], list[float], list[float]]:
    """Slope, R² and R² without skips per seed: the paper's slope 0.992 at a stated seed noise 0.2, R² N(0.95, 0.03)
    (at most 1), without skips N(0.3, 0.2) in [0, 1]; null: slope N(0, 0.2), both R² N(0.95, 0.03)."""
    slope = _normal(rng, 0.0 if null else 0.992, 0.2)
    r2 = np.minimum(1.0, rng.normal(0.95, 0.03, SEEDS)).tolist()
    without = (np.minimum(1.0, rng.normal(0.95, 0.03, SEEDS)) if null
               else np.clip(rng.normal(0.3, 0.2, SEEDS), 0.0, 1.0)).tolist()
    return slope, r2, without


def test_ra4():
    """Figure 4b: 1/σ₁ linear in depth after block 5, slope 0.992 (see :func:`_ra4_draws` for the stated noise),
    over 8 fitted blocks (the cpu budget's 12 blocks from block 5); 3 seeds. A fit over 4 blocks is not
    measurable."""
    rng = np.random.default_rng(21)

    def run(null: bool) -> Verdict:
        return alignment.ra4_verdict(*_ra4_draws(rng, null), 8, [])

    _check("Figure 4b, RA4", _simulate(lambda: run(False)), _simulate(lambda: run(True)))
    short = alignment.ra4_verdict(*_ra4_draws(rng, False), 4, [])
    assert short.verdict == "not measurable" and "covers 4 blocks" in short.reason


def test_neural_collapse():
    """Figure 7: NC1–NC4 fall over 350 epochs; no values read off. Stated truth: each measure's log10 N(0, 0.3) at
    the first evaluation and N(−1.5, 0.3) at the last (1.5 decades), alignment with skips N(0.5, 0.05) above the
    random bases' N(0.03, 0.005); 3 seeds. Null: the last evaluation from the first's distribution."""
    rng = np.random.default_rng(22)

    def run(fall: float) -> Verdict:
        early = {key: _normal(rng, 0.0, 0.3) for key in alignment.NC_FIGURE7}
        late = {key: _normal(rng, -fall, 0.3) for key in alignment.NC_FIGURE7}
        return alignment.nc_verdict(early, late, _normal(rng, 0.5, 0.05), _normal(rng, 0.03, 0.005), [])

    _check("Figure 7, NC1–NC4", _simulate(lambda: run(1.5)), _simulate(lambda: run(0.0)))


BLOCKS = 12
"""The cpu budget's FC ResNet: 12 blocks, RA4 fitted from block 5."""


def _reports(rng: np.random.Generator, null: bool) -> dict[str, list[dict]]:
    """Alignment reports per shortcut and seed. The paper gives RA1–RA3 as pictures; the stated truth: straightness
    N(0.95, 0.02) with skips, N(0.6, 0.1) without; step-length CV N(0.2, 0.05) and N(0.6, 0.15); alignment N(0.5, 0.05)
    and N(0.1, 0.03), random bases N(0.03, 0.005); top-C / next-C σ N(5, 1) and N(1.5, 0.3); RA4 as
    :func:`_ra4_draws`. Null: the network without skips from the one with skips' distributions, and the alignment
    with skips (and without) from the random bases'."""
    def arm(skips: bool) -> list[dict]:
        with_ = skips or null
        out = []
        for _ in range(SEEDS):
            out.append({"straightness": rng.normal(0.95, 0.02) if with_ else rng.normal(0.6, 0.1),
                        "spacing_cv": rng.normal(0.2, 0.05) if with_ else rng.normal(0.6, 0.15),
                        "align_offdiag": rng.normal(0.03, 0.005) if null else
                        rng.normal(0.5, 0.05) if skips else rng.normal(0.1, 0.03),
                        "baseline_mean": rng.normal(0.03, 0.005),
                        "topk_ratio": abs(rng.normal(5, 1)) if with_ else abs(rng.normal(1.5, 0.3)),
                        "ra4_fit_from": 5, "inv_sigma": list(np.arange(1.0, BLOCKS + 1)),
                        "inv_sigma_fit": list(np.arange(1.0, BLOCKS + 1))})
        return out

    reports = {"identity": arm(True), "none": arm(False)}
    slope, r2, r2_without = _ra4_draws(rng, null)
    for seed in range(SEEDS):
        reports["identity"][seed] |= {"inv_sigma1_slope": slope[seed], "inv_sigma1_r2": r2[seed]}
        reports["none"][seed] |= {"inv_sigma1_slope": 0.0, "inv_sigma1_r2": r2_without[seed]}
    return reports


def test_residual_alignment_through_judged():
    """RA1 (Figure 1), RA2 (Figure 2), RA3 (Figure 4a) and RA4 (Figure 4b) as ``alignment.judged`` decides them from
    the FC experiment's reports (see :func:`_reports` for the stated truth and null), both networks at test accuracy
    0.95 and 0.9; 3 seeds. A network with skips at 0.3 makes every claim not measurable."""
    rng = np.random.default_rng(23)
    accuracy = {"identity": [0.95] * SEEDS, "none": [0.9] * SEEDS}

    def run(null: bool) -> dict[str, Verdict]:
        results = alignment.judged("fc", _reports(rng, null), None, accuracy, "", [], 0.0, False)
        return {r.claim.id: r.judged for r in results}

    at_paper, at_null = _simulate(lambda: run(False)), _simulate(lambda: run(True))
    assert set(at_paper[0]) == {f"alignment.ra{k}.fc" for k in range(1, 5)}
    for claim in at_paper[0]:
        _check(f"{claim} through alignment.judged", [v[claim] for v in at_paper], [v[claim] for v in at_null])
    failed = alignment.judged("fc", _reports(rng, False), None, {"identity": [0.3] * SEEDS, "none": [0.9] * SEEDS},
                              "", [], 0.0, False)
    assert all(r.verdict == "not measurable" for r in failed)


# -- Multiplicity ------------------------------------------------------------------------------------------------------

def test_holm_within_a_paper():
    """Two judged claims of ResidualDroppath, p ≈ 0.028 ("holds" alone) and p ≈ 0.33: Holm doubles the smaller to
    ≈ 0.056, so it reads "inconclusive", and the family (2) is reported; a claim of another paper, one not measurable
    and one whose experiment failed are not members."""
    holds = judge([0.4, 1.0, 0.7], what="gain")
    assert holds.verdict == "holds" and 0.025 < holds.p < 0.05
    weak = judge([0.1, -0.1, 0.05], what="gain")
    other_paper = judge([0.4, 1.0, 0.7], what="gain")
    unmeasured = judge([0.4, 1.0, 0.7], what="gain", preconditions=["no"])
    results = [Result(droppath.CLAIMS["table1"], {}, "", holds), Result(droppath.CLAIMS["figure3"], {}, "", weak),
               Result(decayed.CLAIMS["mae"], {}, "", other_paper),
               Result(decayed.CLAIMS["rank"], {}, "", unmeasured), Result(toy_mae.CLAIMS["unet"], {}, "", None,
                                                                          error="boom")]
    sizes = adjust_for_multiplicity(results)
    assert sizes == {"alignment": 0, "decayed": 1, "droppath": 2}
    table1, figure3, mae, rank, unet = results
    assert table1.verdict == "inconclusive" and "Holm-adjusted over the paper's 2 judged claims" in table1.reason
    assert table1.judged.p_holm == pytest.approx(2 * holds.p) and table1.judged.family == 2
    assert figure3.judged.p_holm == pytest.approx(max(2 * holds.p, weak.p)) and figure3.verdict == "inconclusive"
    assert mae.verdict == "holds" and mae.judged.family == 1 and mae.judged.p_holm == pytest.approx(holds.p)
    assert rank.verdict == "not measurable" and rank.judged.family == 0 and unet.verdict == "error"
    assert table1.record()["family"] == 2 and table1.record()["p_holm"] == pytest.approx(2 * holds.p)
