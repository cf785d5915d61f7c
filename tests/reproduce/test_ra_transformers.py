"""Residual Alignment in Transformers (``alignment.transformers``): the generated text is deterministic and has the
grammar's structure; the smoke budget measures every claim and writes its rows; the claims are judged in a Holm
family of their own; without transformers every row names the ``[hf]`` extra."""

import json
import math
import re

import pytest

from lab.reproduce import _measure, experiment_seeds, reproduce
from lab.reproduce import ra_transformers as rt
from lab.reproduce.alignment import claims_of as resnet_claims
from lab.reproduce.claims import Result, adjust_for_multiplicity, family_name, family_of
from lab.reproduce.verdict import judge
from tests.test_extras import hide

IDS = [c.id for c in rt.all_claims()]


def test_the_text_is_deterministic_and_every_sentence_follows_the_grammar_with_agreement():
    text = rt.grammar_text(500, seed=3)
    assert text == rt.grammar_text(500, seed=3) and text != rt.grammar_text(500, seed=4)
    sentences = text.split(". ")
    assert len(sentences) == 500 and text.endswith(".") and text.isascii()
    objects = 0
    for sentence in sentences:
        words = sentence.rstrip(".").split(" ")
        subject_end = 3 if words[1] in rt.ADJECTIVES else 2
        noun, verb = words[subject_end - 1], words[subject_end]
        number = next(n for n in "sp" if noun in rt.NOUNS[n])
        assert words[0] in rt.DETERMINERS[number] and verb in rt.VERBS[number], sentence  # agreement
        rest = words[subject_end + 1:]
        if rest:
            objects += 1
            other = next(n for n in "sp" if rest[-1] in rt.NOUNS[n])
            assert rest[0] in rt.DETERMINERS[other] and len(rest) in (2, 3), sentence
            assert len(rest) == 2 or rest[1] in rt.ADJECTIVES
    assert 0.6 < objects / 500 < 0.8  # OBJECT_P = 0.7
    ids = rt.byte_ids(text)
    assert not ids.dtype.is_floating_point and int(ids.max()) < 128
    entropy = rt.byte_entropy(ids)
    assert 2.0 < entropy < math.log(27)  # about 20 letters, the space and the full stop: far from uniform bytes
    assert re.fullmatch(r"[a-z .]+", text)


def test_the_claims_form_a_holm_family_of_their_own():
    claims = rt.all_claims()
    assert IDS == ["alignment.ra1.transformers.vit", "alignment.ra2.transformers.vit",
                   "alignment.ra3.transformers.vit", "alignment.ra4.transformers.vit",
                   "alignment.ra1.transformers.gpt2", "alignment.ra2.transformers.gpt2",
                   "alignment.ra4.transformers.gpt2"]  # RA3 on the ViT only: a language model has no classes
    assert {family_of(c) for c in claims} == {"alignment+transformers"}
    assert family_name("alignment+transformers").endswith("(the lab's extension to Transformers)")
    nc_conv = next(c for c in resnet_claims("conv") if c.id == "alignment.nc.conv")
    assert family_of(nc_conv) == "alignment+extensions"  # the lab's other extension keeps its family
    assert family_name("alignment+extensions").endswith("(the lab's extensions)")
    rows = [Result(c, {}, "", judge([1.0, 1.2, 0.9], what="x")) for c in [*claims, nc_conv, *resnet_claims("fc")]]
    sizes = adjust_for_multiplicity(rows)
    assert sizes["alignment+transformers"] == 7 and sizes["alignment+extensions"] == 1 and sizes["alignment"] == 5
    assert {r.judged.family for r in rows[:7]} == {7}


def _report(**values: float) -> dict:
    base = {"straightness": 0.5, "spacing_cv": 0.5, "align_offdiag": 0.1, "baseline_mean": 0.05, "topk_ratio": 2.0,
            "inv_sigma1_slope": 0.1, "inv_sigma1_r2": 0.5, "inv_sigma": [1.0 + 0.1 * i for i in range(8)],
            "inv_sigma_fit": [math.nan] * 8, "ra4_fit_from": 4, "ra4_fit_to": 8}
    return {**base, **values}


def test_each_claim_compares_the_trained_network_with_itself_at_initialisation():
    """Trained networks straighter, more aligned, of a sharper spectrum and a linear 1/σ₁ than at initialisation hold;
    a network that did not learn is not measurable, and says how far it got."""
    n = 5
    init = [_report(straightness=0.3 + 0.01 * k, spacing_cv=0.6, align_offdiag=0.06, topk_ratio=1.5,
                    inv_sigma1_r2=0.3 + 0.01 * k) for k in range(n)]
    trained = [_report(straightness=0.6 + 0.02 * k, spacing_cv=0.3 - 0.01 * k, align_offdiag=0.3 + 0.01 * k,
                       topk_ratio=3.0 + 0.1 * k, inv_sigma1_slope=0.2 + 0.01 * k, inv_sigma1_r2=0.95 - 0.01 * k)
               for k in range(n)]
    results = rt.judged("vit", init, trained, [0.9] * n, "a ViT", ["python -m lab reproduce"], 1.0, False)
    assert [r.claim.id for r in results] == IDS[:4] and all(r.verdict == "holds" for r in results), \
        [(r.claim.id, r.reason) for r in results]
    assert "trained minus at initialisation" in results[1].reason and "random baseline" in results[1].reason
    assert "test accuracy 0.9" in results[0].lab_value and results[3].figure is not None
    assert "σ₁ ∝ i^b" in results[3].reason  # the exponent beside the paper's 1/i, not judged
    stuck = rt.judged("gpt2", init, trained, [3.0] * n, "a decoder", [], 1.0, False, entropy=2.7)
    assert [r.claim.id for r in stuck] == IDS[4:] and {r.verdict for r in stuck} == {"not measurable"}
    assert "learned no more than the bytes' frequencies" in stuck[0].reason


def test_the_smoke_budget_measures_every_claim_and_writes_its_rows(tmp_path):
    results, _ = reproduce(tmp_path / "out", papers=["alignment"], budget="smoke", progress=False)
    ours = [r for r in results if r.claim.id in IDS]
    assert [r.claim.id for r in ours] == IDS and {r.verdict for r in ours} == {"pipeline only"}
    assert all(r.values and r.commands[0].startswith("python -m lab reproduce") and r.seconds > 0 for r in ours)
    assert all(r.scale and r.claim.paper_scale and r.claim.extension for r in ours)
    record = json.loads((tmp_path / "out" / "claims.json").read_text())
    rows = {c["id"]: c for c in record["claims"]}
    assert set(IDS) <= set(rows) and all(rows[i]["verdict"] == "pipeline only" for i in IDS)
    assert "the lab's extension to Transformers" in record["scope"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert all(f"| {i} |" in md for i in IDS)


def test_without_transformers_every_claim_names_the_hf_extra(tmp_path, monkeypatch):
    hide(monkeypatch, "transformers")
    results = _measure("alignment.transformers", "smoke", experiment_seeds("smoke"), tmp_path / "runs", tmp_path,
                       lambda: None)
    pip = 'needs the [hf] extra: pip install "residual-lab[hf]" (or "residual-lab[all]")'
    assert [r.claim.id for r in results] == IDS
    assert all((r.verdict, r.reason, r.lab_value) == ("not measurable", pip, pip) for r in results)


@pytest.mark.parametrize("kind", rt.KINDS)
def test_the_setting_says_what_is_trained(kind):
    words = rt.scale(kind, "cpu")
    assert "AdamW" in words and "residual steps" in words and ("digits" in words if kind == "vit" else
                                                                 "grammar" in words)
