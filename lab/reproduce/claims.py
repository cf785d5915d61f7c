"""What a reproduction reports: a paper's claim, the lab's measurement of it over seeds, and a verdict.

A :class:`Claim` holds what the paper says, in its words and numbers, and where (figure or table). An experiment
measures one or more claims at once (one training serves RA1 to RA4) and returns a :class:`Result` per claim: the
lab's values per seed, a verdict and its reason, the commands that reproduce it and the time it took.

Verdicts: ``holds`` (the lab's measurement shows the paper's effect), ``differs`` (it does not, or the opposite),
``not measurable`` (this budget or this scale cannot show it, with the reason: the numbers are still reported).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PAPERS = {
    "alignment": "Residual Alignment: Uncovering the Mechanisms of Residual Networks",
    "decayed": "Residual Connections Harm Generative Representation Learning",
    "droppath": "ResidualDroppath: Enhancing Feature Reuse over Residual Connections",
}
VERDICTS = ("holds", "differs", "not measurable")


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
    """

    id: str
    paper: str
    where: str
    statement: str
    paper_value: str
    measure: str


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
        verdict: one of :data:`VERDICTS`.
        reason: why that verdict.
        commands: the commands that reproduce it.
        seconds: time of the experiment that measured it (shared by the claims it measured).
        figure: curves that show it (seed 0), or None.
    """

    claim: Claim
    values: dict[str, list[float]]
    lab_value: str
    verdict: str
    reason: str
    commands: list[str] = field(default_factory=list)
    seconds: float = 0.0
    figure: Curves | None = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}; got {self.verdict!r}")

    def record(self) -> dict[str, Any]:
        """A JSON-ready dict (``claims.json``): non-finite values as None."""
        def plain(v: float) -> float | None:
            return float(v) if math.isfinite(v) else None

        c = self.claim
        return {"id": c.id, "paper": PAPERS[c.paper], "where": c.where, "statement": c.statement,
                "paper_value": c.paper_value, "measure": c.measure, "lab_value": self.lab_value,
                "values": {k: [plain(v) for v in vs] for k, vs in self.values.items()}, "verdict": self.verdict,
                "reason": self.reason, "commands": self.commands, "seconds": round(self.seconds, 1)}


def mean_sd(values: list[float], digits: int = 3) -> str:
    """``mean ± sd`` over seeds (sd with n − 1; just the value for one seed)."""
    a = np.asarray(values, dtype=np.float64)
    if len(a) == 0 or not np.isfinite(a).any():
        return "n/a"
    a = a[np.isfinite(a)]
    if len(a) == 1:
        return f"{a[0]:.{digits}g}"
    return f"{a.mean():.{digits}g} ± {a.std(ddof=1):.{digits}g}"


def not_at_this_budget(claim: Claim, commands: list[str], why: str) -> Result:
    """The result of a claim this budget does not run: the commands that do, and why not here."""
    return Result(claim, {}, "—", "not measurable", why, commands)
