"""What a reproduction reports: a paper's claim, the lab's measurement of it over seeds, and the verdict.

A :class:`Claim` holds what the paper says, in its words and numbers, where (figure or table), the setting it was
measured in, and — when the claim has a size — the paper's effect relative to its baseline. An experiment measures
one or more claims at once (one training serves RA1 to RA4) and returns a :class:`Result` per claim: the lab's
values per seed, the verdict of :mod:`lab.reproduce.verdict` with the effect, interval, test and floor it rests
on, the lab's setting beside the paper's, the commands that reproduce it and the time it took.

An experiment that raises is no verdict: its claims are reported as ``error`` with the exception, and ``lab
reproduce`` exits non-zero. A claim whose measurement needs an extra of the lab that is not installed (digits-FD:
torchmetrics, of ``[diffusion]``) is not measurable, its row naming the extra and the ``pip install`` line
(:func:`needs_extras`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lab.extras import needs_words
from lab.reproduce.verdict import JUDGED, Stats, Verdict, holm

PAPERS = {
    "alignment": "Residual Alignment: Uncovering the Mechanisms of Residual Networks",
    "decayed": "Residual Connections Harm Generative Representation Learning",
    "droppath": "ResidualDroppath: Enhancing Feature Reuse over Residual Connections",
}
MAX_SEEDS = 100
"""The most seeds a reproduction measures: each is one more training of every arm (``--seeds 1000000000``, or the same
in a ``reproduce.json``, took memory until the machine ran out, planning them)."""
ERROR = "error"
"""What a claim reads when its experiment failed: no verdict."""


@dataclass(frozen=True)
class Claim:
    """One claim of a paper.

    Attributes:
        id: stable key, e.g. ``alignment.ra2``.
        paper: key of :data:`PAPERS`.
        where: the figure or table, e.g. ``Figure 2``.
        statement: what the paper claims, in its words.
        paper_value: the paper's number(s), as text.
        measure: what the lab measures for it, in words.
        paper_scale: the setting the paper measured it in (model, data, training).
        relative: the paper's effect relative to its baseline (``(83.6 − 76.5) / 76.5``), None for a claim without
            a size.
        extension: the lab's own extension of the paper (a claim the paper does not make, such as neural collapse
            in a conv net where the paper shows it for FC ones): judged in a Holm family of its own
            (:func:`family_of`), so it neither weakens nor borrows the paper's.
        family: for an extension, the key of a Holm family of its own apart from the paper's other extensions
            (:data:`FAMILIES`: ``transformers`` judges the claims on Transformers as ``alignment+transformers``);
            empty: the paper's extensions family.
    """

    id: str
    paper: str
    where: str
    statement: str
    paper_value: str
    measure: str
    paper_scale: str = ""
    relative: float | None = None
    extension: bool = False
    family: str = ""


FAMILIES = {"extensions": "the lab's extensions", "transformers": "the lab's extension to Transformers"}
"""The families of the lab's extensions, apart from each paper's own (:func:`family_of`), in words."""


def family_of(claim: Claim) -> str:
    """The Holm family a claim is judged in: its paper's key, ``<paper>+extensions`` for the lab's extensions, or
    ``<paper>+<family>`` for an extension with a family of its own (:attr:`Claim.family`)."""
    return f"{claim.paper}+{claim.family or 'extensions'}" if claim.extension else claim.paper


def family_name(key: str) -> str:
    """A family's name in words (:func:`family_of`)."""
    paper, _, extension = key.partition("+")
    return PAPERS[paper] + (f" ({FAMILIES.get(extension, extension)})" if extension else "")


@dataclass(frozen=True)
class Curves:
    """A figure as data: named curves ``label → (x, y)`` on shared axes (the report draws them)."""

    title: str
    x_label: str
    y_label: str
    series: dict[str, tuple[list[float], list[float]]]
    log_y: bool = False


@dataclass
class Result:
    """The lab's measurement of a claim.

    Attributes:
        claim: the claim.
        values: per quantity, one value per seed.
        lab_value: the measurement as text (mean ± sd over seeds).
        judged: the verdict and the numbers it rests on (:func:`~lab.reproduce.verdict.judge`); None for an
            experiment that failed (:data:`ERROR`).
        scale: the lab's setting (model, data, training) for this budget.
        commands: the commands that reproduce it.
        seconds: time of the experiment that measured it (shared by the claims it measured).
        figure: curves that show it (seed 0), or None.
        error: why the experiment failed (with ``judged`` None).
    """

    claim: Claim
    values: dict[str, list[float]]
    lab_value: str
    judged: Verdict | None
    scale: str = ""
    commands: list[str] = field(default_factory=list)
    seconds: float = 0.0
    figure: Curves | None = None
    error: str = ""

    @property
    def verdict(self) -> str:
        return ERROR if self.judged is None else self.judged.verdict

    @property
    def reason(self) -> str:
        return self.error if self.judged is None else self.judged.reason

    def record(self) -> dict[str, Any]:
        """A JSON-ready dict (``claims.json``): non-finite values as None."""
        def plain(v: float) -> float | None:
            return float(v) if math.isfinite(v) else None

        c = self.claim
        numbers = self.judged.record() if self.judged is not None else {
            "effect": None, "ci95": [None, None], "p_value": None, "p_holm": None, "p_against": None,
            "p_against_holm": None, "family": 0, "seeds": 0, "floor": None, "target": None, "seeds_needed": None,
            "decided_by": None, "parts": []}
        return {"id": c.id, "paper": PAPERS[c.paper], "where": c.where, "statement": c.statement,
                "paper_value": c.paper_value, "measure": c.measure, "lab_value": self.lab_value,
                "values": {k: [plain(v) for v in vs] for k, vs in self.values.items()}, "verdict": self.verdict,
                "reason": self.reason, **numbers, "scale": {"lab": self.scale, "paper": c.paper_scale},
                "commands": self.commands, "seconds": round(self.seconds, 1)}


def mean_sd(values: list[float], digits: int = 3) -> str:
    """``mean ± sd`` over seeds (sd with n − 1; just the value for one seed)."""
    a = np.asarray(values, dtype=np.float64)
    if len(a) == 0 or not np.isfinite(a).any():
        return "n/a"
    a = a[np.isfinite(a)]
    if len(a) == 1:
        return f"{a[0]:.{digits}g}"
    return f"{a.mean():.{digits}g} ± {a.std(ddof=1):.{digits}g}"


def mean(values: list[float]) -> float:
    """The mean of the finite values (NaN when none)."""
    a = np.asarray(values, dtype=np.float64)
    a = a[np.isfinite(a)]
    return float(a.mean()) if len(a) else math.nan


def adjust_for_multiplicity(results: list[Result]) -> dict[str, int]:
    """Holm's correction within each family of judged claims (:func:`family_of`: a paper's claims, and apart from
    them the lab's extensions of it; :func:`~lab.reproduce.verdict.holm`), in place: each judged verdict is re-decided
    on its adjusted p-values, and its power and seeds sized at its family's level
    (:meth:`~lab.reproduce.verdict.Verdict.adjusted`).

    Returns:
        Per family key (:func:`family_of`), the family's size: its claims that a test decided (holds, inconclusive
        or differs; a missing p counts as 1). Claims still pending at full scale are not in it yet. Every paper's
        key is present; an extensions family only where it has a claim.
    """
    keys = list(dict.fromkeys([*PAPERS, *(family_of(r.claim) for r in results)]))
    sizes = {}
    for key in keys:
        family = [r for r in results if family_of(r.claim) == key and r.judged is not None
                  and r.judged.verdict in JUDGED]
        sizes[key] = len(family)

        def known(p: float) -> float:  # a test without a p (one seed, a part without one) is no evidence: 1
            return p if math.isfinite(p) else 1.0

        for r, p, against in zip(family, holm([known(r.judged.p) for r in family]),
                                 holm([known(r.judged.p_against) for r in family]), strict=True):
            r.judged = r.judged.adjusted(p, against, len(family))
    return sizes


def family_words(sizes: dict[str, int]) -> str:
    """The scope's sentence on multiplicity and power."""
    return ("Multiplicity: p-values are Holm-adjusted within each family of judged claims ("
            + ", ".join(f"{family_name(k)}: {n}" for k, n in sizes.items()) + "); a verdict stands on the adjusted "
            "p. A claim still pending is not in its family yet: a verdict can change as more claims are judged. "
            "Power: each row gives the chance that its claim holds at this budget's seeds and this noise if the "
            "effect it plans for is true (the paper's effect in the lab's units where the lab's metric can show it, "
            "else the size of the effect observed here), every part significant at the family's worst-case Holm level "
            "0.05 / m, and the seeds that would give 0.8.")


def not_at_this_budget(claim: Claim, commands: list[str], why: str, scale: str = "") -> Result:
    """The result of a claim this budget does not run: the commands that do, and why not here."""
    empty = Stats(math.nan, (math.nan, math.nan), math.nan, math.nan, math.nan, 0)
    return Result(claim, {}, "—", Verdict("not measurable", why, empty), scale, commands)


def needs_extras(claim: Claim, extras: tuple[str, ...], commands: list[str] | None = None, scale: str = "") -> Result:
    """The result of a claim whose measurement needs extras of the lab that are not installed: not measurable, its
    value and reason naming them and how to install them (``needs the [diffusion] extra: pip install …``), so the
    report's row and the command's line say it."""
    why = needs_words(extras)
    empty = Stats(math.nan, (math.nan, math.nan), math.nan, math.nan, math.nan, 0)
    return Result(claim, {}, why, Verdict("not measurable", why, empty), scale, commands or [])


def failed(claim: Claim, error: BaseException, seconds: float) -> Result:
    """The result of a claim whose experiment raised: an error, not a verdict."""
    return Result(claim, {}, "—", None, seconds=seconds, error=f"the experiment failed: {type(error).__name__}: "
                                                                  f"{error}")
