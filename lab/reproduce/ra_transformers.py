"""Residual Alignment in Transformers: the lab's extension of *Residual Alignment: Uncovering the Mechanisms of
Residual Networks* to the architectures its conclusion leaves open ("our study has not yet extended to Transformers …
whether RA, or a phenomenon akin to it, manifests within these architectures").

Two small Transformers from Hugging Face transformers (the ``[hf]`` extra), each read as its residual steps by
:class:`~lab.nn.hf.HFTransformer` (every attention and every MLP sub-layer one step ``h + F(h)``):

- a **ViT** classifying scikit-learn's 8 × 8 digits (patches of 2 × 2: 16 patches and a class token), analysed as
  the lab analyses any ViT, on the whole token stream (a step's Jacobian maps the ``[17, D]`` stream to itself);
- a **GPT-2-style decoder** over bytes (vocabulary 256, no tokenizer) trained to predict the next byte of a text
  that :func:`grammar_text` generates from a small probabilistic grammar, analysed per token position
  (:mod:`lab.analysis.token_jacobian`: each (window, position) pair is one input of RA1–RA4).

Each seed trains one network of each kind with a plain AdamW loop from ``torch.manual_seed(seed)``, and analyses it
twice with :func:`~lab.analysis.residual_alignment.residual_alignment`: at initialisation and trained. Every claim
compares the trained network with *the same network at initialisation*, paired by seed (the paper's reading: RA
emerges with training), and RA2 also with Haar-random bases. RA3 (rank about C, stated for fully-connected ResNets)
is measured on the ViT only: a language model has no classes, so there is no C to compare a rank with. The verdicts
are :func:`~lab.reproduce.verdict.judge`'s, in a Holm family of their own (``alignment+transformers``,
:func:`~lab.reproduce.claims.family_of`): they neither weaken the paper's claims nor the lab's other extensions.

A claim compares trained networks only where they learned: the ViT's mean test accuracy must reach
:data:`VIT_TRAINED`, and the decoder's mean held-out loss must lie below the text's byte entropy (a model that only
learned how often each byte occurs reaches that entropy; one below it has learned the text's structure).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor, nn

from lab.reproduce.alignment import ra4_exponent, ra4_verdict, report_values
from lab.reproduce.claims import Claim, Curves, Result, mean, mean_sd
from lab.reproduce.runs import command
from lab.reproduce.verdict import Verdict, combine, judge
from lab.runs.store import RunStore

P = "alignment"
FAMILY = "transformers"
"""The claims' Holm family, apart from the paper's and from the lab's other extensions (``alignment+transformers``)."""
KINDS = ("vit", "gpt2")
NAMES = {"vit": "ViT", "gpt2": "GPT-2-style decoder"}
PAPER_SCALE = ("not measured by the paper: its conclusion leaves Transformers open; its RA1–RA4 come from ResNets "
               "(ResNet34-sized Types 1–5 on MNIST, FashionMNIST, CIFAR-10/100 and ImageNette, 500 epochs of SGD)")
CLAIMS = {
    "ra1": Claim("alignment.ra1.transformers", P, "Figure 1", "RA1: intermediate representations of an input lie on "
                 "a line through the blocks, equally spaced", "qualitative (trajectories of ResNets)",
                 "straightness of h_0 … h_L over the residual steps (1 = a line) and the coefficient of variation of "
                 "its step lengths (0 = equally spaced), trained against the same network at initialisation",
                 PAPER_SCALE, extension=True, family=FAMILY),
    "ra2": Claim("alignment.ra2.transformers", P, "Figure 2", "RA2: the top singular vectors of the residual "
                 "Jacobians align across blocks", "diagonal U_jᵀ J_i V_j for all block pairs (ResNets)",
                 "mean alignment score over step pairs i ≠ j, above Haar-random bases and above the same network at "
                 "initialisation", PAPER_SCALE, extension=True, family=FAMILY),
    "ra3": Claim("alignment.ra3.transformers", P, "Figure 4a", "RA3: residual Jacobians have rank at most about the "
                 "number of classes C", "the top-C singular values noticeably surpass the next ones (FC ResNets)",
                 "log of (mean top-C σ / mean next-C σ) of the whole-stream Jacobians, trained minus at "
                 "initialisation; the ViT only (a language model has no classes C to compare a rank with)",
                 PAPER_SCALE, extension=True, family=FAMILY),
    "ra4": Claim("alignment.ra4.transformers", P, "Figure 4b", "RA4: the top singular value of block i scales as 1/i "
                 "after RA begins", "1/σ₁ linear in depth post block 5, slope 0.992: σ₁ close to 1/i (ResNets)",
                 "judged: the least-squares slope of 1/σ₁ against the step index from step 4 (trained) above 0, and "
                 "its R² above the same network's at initialisation, with a mean R² above 0.8 over at least 5 fitted "
                 "steps as the floor; beside it, not judged, the exponent b of σ₁ ∝ i^b over the same steps (−1 for "
                 "1/i)", PAPER_SCALE, extension=True, family=FAMILY),
}
"""The claims, one set per model kind (:func:`claims_of`); RA3 on the ViT only."""
SIZES = {
    "smoke": {"layers": 2, "width": 16, "heads": 2, "steps": 3, "images": 2, "windows": 2, "tokens": 16,
              "positions": (7, 15), "sentences": 300},
    "cpu": {"layers": 4, "width": 32, "heads": 4, "steps": 600, "images": 8, "windows": 8, "tokens": 32,
            "positions": (7, 15, 23, 31), "sentences": 4000},
}
"""Per budget: Transformer layers (two residual steps each), width D, heads, AdamW steps (batches of :data:`BATCH`),
analysed ViT test images, analysed decoder windows of ``tokens`` bytes and the positions read in each, and the
training text's sentences."""
BATCH = {"vit": 64, "gpt2": 32}
LR = 3e-3
"""AdamW's learning rate (weight decay 0.01, its default), constant: both kinds train in a few hundred steps."""
K = {"vit": 20, "gpt2": 16}
"""Singular triplets per step: the ViT's the least RA3 takes (K ≥ 2C, C = 10 digits) — its 544 × 544 whole-stream
Jacobians' top-K SVDs are most of the experiment's time, and grow with K; the decoder's half its width D = 32 (the
paper's K of 10–30 is for widths of 64–512)."""
RA4_FROM = 4
"""The first fitted step of RA4 (1-based): eight steps leave five from step 4, the fewest a test of linearity takes
(``RA4_BLOCKS`` of :mod:`lab.reproduce.alignment`; the paper fits from block 5 of a ResNet34's 16)."""
VIT_TRAINED = 0.8
"""The mean test accuracy the ViT must reach (ten digits: chance is 0.1) for its trained Jacobians to be a trained
network's: at the cpu budget it reaches 0.85–0.95 (11 seeds)."""
HELD_OUT_SEED = 1
"""The seed of the held-out text (the training text's is 0): the same sentences' grammar, other sentences."""


DETERMINERS = {"s": ("the", "a", "one"), "p": ("the", "some", "two")}
NOUNS = {"s": ("cat", "dog", "bird", "fox"), "p": ("cats", "dogs", "birds", "foxes")}
VERBS = {"s": ("sees", "likes", "chases"), "p": ("see", "like", "chase")}
ADJECTIVES = ("red", "small", "old")
ADJECTIVE_P, OBJECT_P = 0.4, 0.7
"""The grammar of :func:`grammar_text`: a noun phrase is a determiner, an adjective with probability
:data:`ADJECTIVE_P`, and a noun, all of one number (singular ``s`` or plural ``p``, equally likely); a sentence is a
noun phrase, a verb agreeing with its number, with probability :data:`OBJECT_P` a second noun phrase (of its own
number), and a full stop."""


def _noun_phrase(rng: random.Random) -> tuple[str, list[str]]:
    number = rng.choice("sp")
    words = [rng.choice(DETERMINERS[number])]
    if rng.random() < ADJECTIVE_P:
        words.append(rng.choice(ADJECTIVES))
    return number, [*words, rng.choice(NOUNS[number])]


def grammar_text(sentences: int, seed: int = 0) -> str:
    """A text of ``sentences`` sentences drawn from the grammar above (:data:`DETERMINERS` …), separated by single
    spaces, the same for the same seed: "the small cats chase one bird. a fox sees."

    Its structure is learnable: a byte model that knows the words and the agreement of a verb with its subject's
    number predicts most bytes; one that knows only how often each byte occurs cannot (:func:`byte_entropy`).

    Args:
        sentences: how many sentences.
        seed: seeds Python's ``random.Random``, nothing else.

    Returns:
        ASCII text.
    """
    rng = random.Random(seed)
    out = []
    for _ in range(sentences):
        number, subject = _noun_phrase(rng)
        words = [*subject, rng.choice(VERBS[number])]
        if rng.random() < OBJECT_P:
            words += _noun_phrase(rng)[1]
        out.append(" ".join(words) + ".")
    return " ".join(out)


def byte_ids(text: str) -> Tensor:
    """The bytes of an ASCII text as token ids, int64 ``[n]`` in 0 … 255."""
    return torch.tensor(list(text.encode("ascii")), dtype=torch.long)


def byte_entropy(ids: Tensor) -> float:
    """The entropy (nats) of the bytes' frequencies in ``ids [n]``: the held-out loss of a model that learned how
    often each byte occurs and nothing else."""
    p = torch.bincount(ids, minlength=256).double()
    p = p[p > 0] / p.sum()
    return float(-(p * p.log()).sum())


def windows(ids: Tensor, count: int, length: int, generator: torch.Generator) -> Tensor:
    """``count`` windows of ``length`` consecutive ids of ``ids [n]`` at random starts: int64 ``[count, length]``."""
    starts = torch.randint(0, len(ids) - length + 1, (count,), generator=generator)
    return torch.stack([ids[s:s + length] for s in starts.tolist()])


@dataclass
class Trained:
    """One seed of one kind: its alignment reports (:func:`report_of`) at initialisation and trained, and how far it
    learned (the ViT's test accuracy, or the decoder's held-out loss in nats per byte)."""

    init: dict
    trained: dict
    learned: float


def report_of(out: dict[str, np.ndarray]) -> dict:
    """The numbers a claim reads from :func:`~lab.analysis.residual_alignment.residual_alignment`'s result, under
    the alignment report's names (:func:`lab.reproduce.alignment.report_values`; ``ra4_fit_from`` 1-based)."""
    scalars = ("straightness", "spacing_cv", "align_offdiag", "baseline_mean", "topk_ratio", "inv_sigma1_slope",
               "inv_sigma1_r2")
    return {**{key: float(out[key]) for key in scalars}, "inv_sigma": [float(v) for v in out["inv_sigma"]],
            "inv_sigma_fit": [float(v) for v in out["inv_sigma_fit"]], "ra4_fit_from": int(out["fit_start"]) + 1,
            "ra4_fit_to": int(out["fit_stop"])}


def _analyse(model: nn.Module, x: Tensor, y: Tensor, kind: str, seed: int, budget: str) -> dict:
    """RA1–RA4 of ``model`` (:class:`~lab.nn.hf.HFTransformer`) at the inputs ``x``: a ViT's whole stream with its
    ten classes, a decoder's tokens at the budget's positions with none."""
    from lab.analysis.residual_alignment import residual_alignment

    extra = ({"num_classes": 10} if kind == "vit" else
             {"num_classes": 0, "positions": list(SIZES[budget]["positions"])})
    return report_of(residual_alignment(model, x, y, K[kind], fit_start=RA4_FROM - 1, seed=seed, **extra))


def _vit(budget: str) -> nn.Module:
    """A ViT classifier of 8 × 8 grey digits, patches of 2 × 2, no dropout, at the budget's size."""
    import transformers

    s = SIZES[budget]
    config = transformers.ViTConfig(image_size=8, patch_size=2, num_channels=1, hidden_size=s["width"],
                                    num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                                    intermediate_size=4 * s["width"], num_labels=10, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0, attn_implementation="eager")
    return transformers.ViTForImageClassification(config)


def _gpt2(budget: str) -> nn.Module:
    """A GPT-2 language model over bytes (vocabulary 256), no dropout, at the budget's size and window."""
    import transformers

    s = SIZES[budget]
    config = transformers.GPT2Config(vocab_size=256, n_positions=s["tokens"], n_embd=s["width"], n_layer=s["layers"],
                                     n_head=s["heads"], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    return transformers.GPT2LMHeadModel(config)


def _fit(model: nn.Module, loss_of: Callable[[torch.Generator], Tensor], steps: int, seed: int) -> None:
    """``steps`` AdamW steps (:data:`LR`) on ``loss_of(batches)``, the batches drawn from a generator of ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    model.train()
    for _ in range(steps):
        loss = loss_of(generator)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"the training loss is {float(loss)}")
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    model.eval()


def train_vit(seed: int, budget: str) -> Trained:
    """The ViT of ``seed``: analysed at initialisation, trained on the digits' training split, analysed again on the
    first test images; its test accuracy over the whole test split."""
    from lab.data.readers import load_digits
    from lab.nn.hf import HFTransformer

    s = SIZES[budget]
    digits = load_digits(seed=0)  # the lab's fixed split: 1,347 training and 450 test images
    torch.manual_seed(seed)
    net = _vit(budget)
    view = HFTransformer(net)
    x, y = digits.x_test[:s["images"]], digits.y_test[:s["images"]]
    init = _analyse(view, x, y, "vit", seed, budget)

    def loss_of(generator: torch.Generator) -> Tensor:
        pick = torch.randint(0, len(digits.x_train), (BATCH["vit"],), generator=generator)
        return nn.functional.cross_entropy(net(pixel_values=digits.x_train[pick]).logits, digits.y_train[pick])

    _fit(net, loss_of, s["steps"], seed)
    with torch.no_grad():
        accuracy = float((net(pixel_values=digits.x_test).logits.argmax(1) == digits.y_test).float().mean())
    return Trained(init, _analyse(view, x, y, "vit", seed, budget), accuracy)


def texts(budget: str) -> tuple[Tensor, Tensor]:
    """The decoder's training and held-out byte ids at ``budget`` (:func:`grammar_text` of seeds 0 and
    :data:`HELD_OUT_SEED`, the held-out text a tenth as long)."""
    n = SIZES[budget]["sentences"]
    return byte_ids(grammar_text(n, 0)), byte_ids(grammar_text(max(50, n // 10), HELD_OUT_SEED))


def _next_byte_loss(net: nn.Module, ids: Tensor) -> Tensor:
    """Mean cross-entropy (nats) of each next byte of windows ``ids [B, T + 1]`` given the bytes before it."""
    logits = net(input_ids=ids[:, :-1]).logits
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def train_gpt2(seed: int, budget: str) -> Trained:
    """The decoder of ``seed``: analysed at initialisation, trained to predict the next byte of the grammar's text,
    analysed again on fixed held-out windows; its held-out loss over 64 fixed held-out windows."""
    from lab.nn.hf import HFTransformer

    s = SIZES[budget]
    train_ids, held_ids = texts(budget)
    T = s["tokens"]
    analysed = windows(held_ids, s["windows"], T, torch.Generator().manual_seed(1000))
    scored = windows(held_ids, 64, T + 1, torch.Generator().manual_seed(1001))
    labels = torch.zeros(len(analysed), dtype=torch.long)  # no classes: the trajectories' colour only
    torch.manual_seed(seed)
    net = _gpt2(budget)
    view = HFTransformer(net)
    init = _analyse(view, analysed, labels, "gpt2", seed, budget)
    _fit(net, lambda g: _next_byte_loss(net, windows(train_ids, BATCH["gpt2"], T + 1, g)), s["steps"], seed)
    with torch.no_grad():
        loss = float(_next_byte_loss(net, scored))
    return Trained(init, _analyse(view, analysed, labels, "gpt2", seed, budget), loss)


def scale(kind: str, budget: str) -> str:
    """The lab's setting of ``kind`` at ``budget``, in words."""
    s = SIZES[budget]
    steps = f"{2 * s['layers']} residual steps ({s['layers']} layers × attention and MLP), width {s['width']}"
    training = f"{s['steps']} AdamW steps (lr {LR:g}, batches of {BATCH[kind]}) from the same seed's initialisation"
    if kind == "vit":
        return (f"Hugging Face ViT, patches of 2 × 2 (16 and a class token), {steps}; scikit-learn digits (1,347 "
                f"training images of 8 × 8), {training}; RA on {s['images']} test images, whole-stream Jacobians, "
                f"K = {K[kind]}")
    return (f"Hugging Face GPT-2 over bytes (vocabulary 256), {steps}, windows of {s['tokens']}; next byte of a "
            f"generated grammar's text ({s['sentences']:,} sentences), {training}; RA per token at positions "
            f"{', '.join(str(p + 1) for p in s['positions'])} of {s['windows']} held-out windows, K = {K[kind]}")


def claims_of(kind: str) -> list[Claim]:
    """:data:`CLAIMS` as measured on ``kind`` (``vit`` or ``gpt2``): ids and measures name it; RA3 on the ViT only
    (a language model has no classes)."""
    return [replace(c, id=f"{c.id}.{kind}", measure=f"{c.measure}; the {NAMES[kind]}")
            for key, c in CLAIMS.items() if kind == "vit" or key != "ra3"]


def all_claims() -> list[Claim]:
    """Every claim of the experiment, in report order."""
    return [c for kind in KINDS for c in claims_of(kind)]


def learned_words(kind: str, learned: Sequence[float], entropy: float = math.nan) -> tuple[list[str], str]:
    """How far ``kind`` learned over the seeds: the failed precondition, if any (the ViT's mean test accuracy below
    :data:`VIT_TRAINED`; the decoder's mean held-out loss not below the text's byte entropy ``entropy``), and the
    numbers in words."""
    if kind == "vit":
        words = f"test accuracy {mean_sd(list(learned))} (chance 0.1)"
        failed = [] if mean(list(learned)) >= VIT_TRAINED else [f"the ViT reached {words}, needs {VIT_TRAINED:g}"]
        return failed, words
    words = f"held-out loss {mean_sd(list(learned))} nats per byte (the text's byte entropy {entropy:.3g})"
    failed = [] if mean(list(learned)) < entropy else [f"the decoder's {words}: it learned no more than the bytes' "
                                                       "frequencies"]
    return failed, words


def _diff(a: list[float], b: list[float]) -> list[float]:
    return [x - y for x, y in zip(a, b, strict=True)]


def judged(kind: str, init: list[dict], trained: list[dict], learned: list[float], setting: str,
           commands: list[str], seconds: float, smoke: bool, *, entropy: float = math.nan) -> list[Result]:
    """The claims of :func:`claims_of` for ``kind`` from per-seed reports (:func:`report_of`) at initialisation and
    trained, whatever their scale.

    Args:
        kind: ``vit`` or ``gpt2``.
        init, trained: per seed, the report of the network at initialisation and trained.
        learned: per seed, the ViT's test accuracy or the decoder's held-out loss (nats per byte).
        setting: the lab's setting, in words.
        commands: the commands that reproduce it.
        seconds: what the experiment took.
        smoke: judge nothing (a pipeline check).
        entropy: the decoder's text's byte entropy (:func:`byte_entropy`), its loss's bar.
    """
    claims = {c.id.split(".")[1]: c for c in claims_of(kind)}
    failed, learned_text = learned_words(kind, learned, entropy)
    quality = "test accuracy" if kind == "vit" else "held-out loss"

    def result(key: str, vals: dict[str, list[float]], text: str, verdict: Verdict,
               figure: Curves | None = None) -> Result:
        return Result(claims[key], {**vals, quality: list(learned)}, f"{text}; {learned_text}", verdict, setting,
                      commands, seconds, figure)

    def pair(key: str) -> tuple[list[float], list[float]]:
        return report_values(trained, key), report_values(init, key)

    out = []
    (s_tr, s_init), (cv_tr, cv_init) = pair("straightness"), pair("spacing_cv")
    out.append(result("ra1", {"straightness trained": s_tr, "straightness at initialisation": s_init,
                              "spacing CV trained": cv_tr, "spacing CV at initialisation": cv_init},
                      f"straightness {mean_sd(s_tr)} trained, {mean_sd(s_init)} at initialisation; step-length CV "
                      f"{mean_sd(cv_tr)} trained, {mean_sd(cv_init)} at initialisation",
                      combine([judge(_diff(s_tr, s_init), what="straightness, trained minus at initialisation",
                                     preconditions=failed, smoke=smoke),
                               judge(_diff(cv_init, cv_tr), what="step-length CV, at initialisation minus trained",
                                     preconditions=failed, smoke=smoke)], "straight and equally spaced")))
    (a_tr, a_init), base = pair("align_offdiag"), report_values(trained, "baseline_mean")
    out.append(result("ra2", {"trained": a_tr, "at initialisation": a_init, "random bases": base},
                      f"{mean_sd(a_tr)} trained, {mean_sd(a_init)} at initialisation, random bases {mean_sd(base)}",
                      combine([judge(_diff(a_tr, base), what="alignment trained minus the random baseline",
                                     preconditions=failed, smoke=smoke),
                               judge(_diff(a_tr, a_init), what="alignment trained minus at initialisation",
                                     preconditions=failed, smoke=smoke)], "aligned, and not at initialisation")))
    if "ra3" in claims:
        r_tr, r_init = pair("topk_ratio")
        log_gap = [math.log(a) - math.log(b) if a > 0 and b > 0 else math.nan for a, b in zip(r_tr, r_init,
                                                                                                strict=True)]
        out.append(result("ra3", {"trained": r_tr, "at initialisation": r_init},
                          f"top-C σ / next-C σ = {mean_sd(r_tr)} trained, {mean_sd(r_init)} at initialisation",
                          judge(log_gap, what="log spectral drop after C, trained minus at initialisation",
                                preconditions=failed, smoke=smoke)))
    (slope, slope_init), (r2, r2_init) = pair("inv_sigma1_slope"), pair("inv_sigma1_r2")
    fit_from, fit_to = trained[0]["ra4_fit_from"], trained[0]["ra4_fit_to"]
    exponent = [ra4_exponent(r["inv_sigma"], r["ra4_fit_from"]) for r in trained]
    exponent_init = [ra4_exponent(r["inv_sigma"], r["ra4_fit_from"]) for r in init]
    steps = list(range(1, len(trained[0]["inv_sigma"]) + 1))
    figure = Curves(f"1/σ₁ by residual step ({NAMES[kind]}, seed 0)", "step i", "1/σ₁",
                    {"trained": (steps, trained[0]["inv_sigma"]), "at initialisation": (steps, init[0]["inv_sigma"])})
    verdict = ra4_verdict(slope, r2, r2_init, fit_to - fit_from + 1, failed, smoke, exponent=exponent,
                          arms=("trained", "at initialisation"), unit="steps")
    out.append(result("ra4", {"slope": slope, "r2": r2, "exponent": exponent, "slope at initialisation": slope_init,
                              "r2 at initialisation": r2_init, "exponent at initialisation": exponent_init},
                      f"1/σ₁ over steps {fit_from}–{fit_to}: slope {mean_sd(slope)}, R² {mean_sd(r2)}, b = "
                      f"{mean_sd(exponent)} trained; slope {mean_sd(slope_init)}, R² {mean_sd(r2_init)}, b = "
                      f"{mean_sd(exponent_init)} at initialisation", verdict, figure))
    return out


def measure(budget: str, seeds: int, store: RunStore, tick: Callable[[], None] = lambda: None) -> list[Result]:
    """Every claim of :func:`all_claims` at ``budget``: per seed 0 … seeds − 1 a ViT and a decoder, each analysed at
    initialisation and trained (the trainings are plain loops in this process: no run folder is written in
    ``store``).

    Raises:
        MissingExtra: transformers (the ``[hf]`` extra) is not installed; the engine reports every claim as not
            measurable, naming it.
    """
    from lab.extras import require

    require("transformers")
    del store  # nothing to write: the networks are not lab configs
    lines = [command("reproduce", "--paper", P, "--budget", budget)]
    entropy = byte_entropy(texts(budget)[1])
    out = []
    for kind, train_one in (("vit", train_vit), ("gpt2", train_gpt2)):
        start = time.perf_counter()
        runs = []
        for seed in range(seeds):
            runs.append(train_one(seed, budget))
            tick()
        out += judged(kind, [r.init for r in runs], [r.trained for r in runs], [r.learned for r in runs],
                      scale(kind, budget), lines, time.perf_counter() - start, budget == "smoke", entropy=entropy)
    return out
