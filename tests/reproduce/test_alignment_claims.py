"""The Residual Alignment rows of ``lab reproduce`` on hand-made reports: the per-arm accuracy precondition and its
words, both arms' accuracies in every row, and RA4 against the paper's σ₁ ≈ 1/i on exact curves."""

import math

import numpy as np
import pytest

from lab.analysis.alignment import inverse_sigma_fit
from lab.config import to_dict
from lab.reproduce import alignment
from lab.reproduce.runs import config

SEEDS = 6
BLOCKS = 12
FIT_FROM = 5
"""The cpu budget's nets: 12 blocks, RA4 fitted from block 5 (1-based)."""
TRAINED = {"identity": [0.98, 0.97, 0.99, 0.98, 0.97, 0.98], "none": [0.95, 0.94, 0.96, 0.95, 0.93, 0.96]}


def _report(inv_sigma: list[float], *, skips: bool) -> dict:
    """An alignment report whose RA1–RA3 numbers read as the paper says (with skips) or as it says a net without skips
    reads, and whose RA4 fields are those of ``inv_sigma`` (1/σ₁ per block), fitted from :data:`FIT_FROM`."""
    inv = np.asarray(inv_sigma, dtype=np.float64)
    fit = inverse_sigma_fit(1.0 / inv, start=FIT_FROM - 1)
    line = np.asarray(fit["fit"], dtype=np.float64).copy()
    line[:FIT_FROM - 1] = np.nan
    rng = np.random.default_rng(len(inv_sigma) + int(1000 * inv[0]))
    return {"straightness": (0.95 if skips else 0.6) + rng.normal(0, 0.01),
            "spacing_cv": (0.2 if skips else 0.6) + rng.normal(0, 0.01),
            "align_offdiag": (0.5 if skips else 0.1) + rng.normal(0, 0.01),
            "baseline_mean": 0.03 + rng.normal(0, 0.001),
            "topk_ratio": (5.0 if skips else 1.5) + rng.normal(0, 0.1),
            "ra4_fit_from": FIT_FROM, "inv_sigma": inv.tolist(), "inv_sigma_fit": line.tolist(),
            "inv_sigma1_slope": fit["slope"], "inv_sigma1_r2": fit["r2"]}


def _noisy(rng: np.random.Generator) -> list[float]:
    """1/σ₁ of a net without skips: no trend, no line."""
    return (1.0 + rng.uniform(0.2, 1.0, BLOCKS)).tolist()


def _reports(curve, rng: np.random.Generator) -> dict[str, list[dict]]:
    """Per shortcut, one report per seed: with skips 1/σ₁ = ``curve(seed)``, without skips :func:`_noisy`."""
    return {"identity": [_report(curve(seed), skips=True) for seed in range(SEEDS)],
            "none": [_report(_noisy(rng), skips=False) for _ in range(SEEDS)]}


def _curves() -> dict[str, list[alignment.Curve]]:
    """NC falling over training with skips (and reported without), one curve per seed."""
    start = {key: 1.0 for key in alignment.NC_FIGURE7}
    end = {key: 0.01 for key in alignment.NC_FIGURE7}
    return {shortcut: [[(0, start), (100, end)] for _ in range(SEEDS)] for shortcut in ("identity", "none")}


def _exact(seed: int) -> list[float]:
    """1/σ₁ = c·i: σ₁ exactly c⁻¹/i, the scale c differing by seed."""
    return ((1.0 + 0.1 * seed) * np.arange(1, BLOCKS + 1)).tolist()


def _judged(kind: str, reports: dict[str, list[dict]], accuracy: dict[str, list[float]] = TRAINED,
            recipe: str = "") -> dict[str, alignment.Result]:
    results = alignment.judged(kind, reports, _curves(), accuracy, "", [], 0.0, False, recipe=recipe)
    return {r.claim.id.split(".")[1]: r for r in results}


# -- the accuracy precondition, per arm --------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["fc", "conv"])
def test_an_untrained_arm_makes_every_row_not_measurable(kind):
    """Without skips at 0.41, 0.66, 0.83 (mean 0.633, below 0.9): every row of that model type is not measurable and
    names the arm, its accuracy and the accuracy it needs; the arm with skips, trained, is not named."""
    rng = np.random.default_rng(1)
    accuracy = {"identity": TRAINED["identity"][:3], "none": [0.41, 0.66, 0.83]}
    reports = {shortcut: arm[:3] for shortcut, arm in _reports(_exact, rng).items()}
    rows = alignment.judged(kind, reports, {k: v for k, v in _curves().items()}, accuracy, "", [], 0.0, False)
    assert {r.claim.id.split(".")[1] for r in rows} == ({"ra1", "ra2", "ra3", "ra4", "nc"} if kind == "fc"
                                                       else {"ra1", "ra2", "ra4", "nc"})
    for row in rows:
        assert row.verdict == "not measurable", row.claim.id
        assert "without skips the net reached 0.633 ± 0.211 test accuracy (needs 0.9)" in row.reason, row.reason
        assert "with skips the net reached" not in row.reason.replace("without skips the net reached", "")


def test_the_precondition_is_each_arms_mean():
    """Each arm on its own: with skips at 0.85 is named even when the net without skips trained; both trained at
    exactly 0.9 is enough; a missing accuracy is no trained arm."""
    assert alignment.untrained({"identity": [0.85, 0.85], "none": [0.95, 0.96]}) == [
        "with skips the net reached 0.85 ± 0 test accuracy (needs 0.9)"]
    assert alignment.untrained({"identity": [0.9, 0.9], "none": [0.89, 0.91]}) == []
    assert alignment.untrained({"identity": [0.95], "none": [math.nan]}) == [
        "without skips the net reached n/a test accuracy (needs 0.9)"]
    both = alignment.untrained({"identity": [0.5], "none": [0.2]}, trained=0.6)
    assert [w.split(" the net")[0] for w in both] == ["with skips", "without skips"]
    assert all("(needs 0.6)" in w for w in both)


def test_trained_is_reached_by_both_arms_with_their_recipe():
    """The recipe of the conv net without skips is a valid set of overrides of the shared config, and only changes
    what it names; the FC one shares the recipe; the smoke budget never changes it."""
    overrides, words = alignment.plain_recipe("conv", "cpu")
    assert overrides and words
    shared = config("ra_fc_digits", ["train.epochs=30"])
    plain = config("ra_fc_digits", ["train.epochs=30", *overrides])
    changed = {f"train.{k}" for k in vars(shared.train) if getattr(shared.train, k) != getattr(plain.train, k)}
    assert changed == {o.split("=")[0] for o in overrides}
    assert alignment.plain_recipe("fc", "cpu") == ((), "")
    assert alignment.plain_recipe("conv", "smoke") == ((), "")
    assert f"without skips {words}" in alignment.scale("conv", "cpu")


# -- both accuracies in every row --------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["fc", "conv"])
def test_every_row_prints_both_accuracies(kind):
    """RA1–RA4 and NC print both arms' test accuracies (mean ± sd) in their text, and how the arm without skips was
    trained where its recipe differs."""
    rows = _judged(kind, _reports(_exact, np.random.default_rng(2)), recipe="weight decay 0.001")
    for key, row in rows.items():
        assert "test accuracy 0.978 ± 0.00753 with skips, 0.948 ± 0.0117 without" in row.lab_value, key
        assert "(trained with weight decay 0.001)" in row.lab_value, key
        assert row.values["test accuracy without skips"] == TRAINED["none"]
    assert "trained with" not in _judged(kind, _reports(_exact, np.random.default_rng(2)))["ra1"].lab_value


# -- RA4: σ₁ against the paper's 1/i ---------------------------------------------------------------------------------

def test_ra4_exponent_on_exact_curves():
    """σ₁ = c/i has exponent −1 whatever c; 1/σ₁ = 0.3·i + 5 falls more slowly (shallower than −1); a missing or
    non-positive 1/σ₁ in the fitted blocks gives no exponent, one before them does not matter."""
    i = np.arange(1, BLOCKS + 1, dtype=np.float64)
    assert alignment.ra4_exponent((3.0 * i).tolist(), FIT_FROM) == pytest.approx(-1.0, abs=1e-12)
    offset = alignment.ra4_exponent((0.3 * i + 5).tolist(), FIT_FROM)
    assert -0.5 < offset < -0.2
    assert alignment.ra4_exponent((0.3 * i - 1).tolist(), FIT_FROM) < -1.0
    assert math.isnan(alignment.ra4_exponent([*i[:6], None, *i[7:]], FIT_FROM))
    assert math.isnan(alignment.ra4_exponent([*i[:6], 0.0, *i[7:]], FIT_FROM))
    assert alignment.ra4_exponent([None, *i[1:]], FIT_FROM) == pytest.approx(-1.0, abs=1e-12)


def test_ra4_holds_at_one_over_i():
    """1/σ₁ = c·i exactly (c from 1 to 1.5 over the seeds): a line of positive slope, R² 1 against a curve without
    skips that is no line; exponent −1: holds, and the paper's 1/i lies inside the interval."""
    row = _judged("fc", _reports(_exact, np.random.default_rng(3)))["ra4"]
    assert row.verdict == "holds", row.reason
    assert row.values["exponent"] == pytest.approx([-1.0] * SEEDS, abs=1e-9)
    assert "σ₁ ∝ i^b with b = -1 ± " in row.lab_value
    assert "the paper's 1/i (b = −1) lies inside it" in row.lab_value
    assert "the paper's 1/i (b = −1) lies inside it" in row.reason
    assert "outside" not in row.reason


def test_ra4_holds_but_says_when_the_paper_is_excluded():
    """1/σ₁ = 0.3·i + 5 (a perfect line, but σ₁ is not ≈ 1/i): still holds as the linear law the paper states, and
    both the text and the reason say that the paper's 1/i lies outside the exponent's interval."""
    def linear(seed: int) -> list[float]:
        return ((0.3 + 0.01 * seed) * np.arange(1, BLOCKS + 1) + 5).tolist()

    row = _judged("conv", _reports(linear, np.random.default_rng(4)))["ra4"]
    assert row.verdict == "holds", row.reason
    excluded = "the paper's 1/i (b = −1) lies outside it, σ₁ falls more slowly than 1/i"
    assert excluded in row.lab_value and excluded in row.reason
    assert all(-0.5 < b < -0.2 for b in row.values["exponent"])


def test_ra4_does_not_hold_on_a_flat_noisy_curve():
    """1/σ₁ flat up to noise with skips: no slope, no line; not holds (the R² floor fails), its exponent reported."""
    rng = np.random.default_rng(5)

    def flat(seed: int) -> list[float]:
        return (2.0 + rng.normal(0, 0.3, BLOCKS)).tolist()

    row = _judged("fc", _reports(flat, rng))["ra4"]
    assert row.verdict != "holds"
    assert "scale-free, σ₁ ∝ i^b" in row.lab_value


def test_ra4_verdict_without_an_exponent_is_unchanged():
    """``ra4_verdict`` called with the fits alone (as the rule's simulation does) judges the same and adds no
    comparison."""
    slope, r2, without = [1.0, 0.9, 1.1], [0.99, 0.98, 0.97], [0.1, 0.3, 0.2]
    bare = alignment.ra4_verdict(slope, r2, without, 8, [])
    compared = alignment.ra4_verdict(slope, r2, without, 8, [], exponent=[-1.0, -1.0, -1.0])
    assert bare.verdict == compared.verdict
    assert "1/i" not in bare.reason and "lies inside it" in compared.reason


@pytest.mark.parametrize("kind", ["fc", "conv"])
def test_the_reproductions_own_configs_switch_no_model(kind):
    """The conv experiments start from the conv config: a plan built over the FC one switched ``model.name`` and
    warned the user of keys it dropped, at every run of ``lab reproduce``."""
    import warnings

    for budget in ("smoke", "cpu"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cfg = config(f"ra_{kind}_digits", alignment._model_overrides(kind, alignment.SIZES[budget]))
        sizes, model = alignment.SIZES[budget], to_dict(cfg)["model"]
        if kind == "conv":
            assert (model["name"], model["depths"], model["channels"], model["feature_size"]) == (
                "conv_resnet", [sizes["blocks"]], [sizes["channels"]], 8)
        else:
            assert (model["name"], model["depth"], model["width"]) == ("fc_resnet", sizes["depth"], sizes["width"])
