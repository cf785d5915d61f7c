"""Figure 3 of *ResidualDroppath: Enhancing Feature Reuse over Residual Connections* on a quantity that can move: the
standardised distance of each layer's grid features to layer 0's, and the share of its path that heads back. Built
networks whose layers rotate the grid's features by known angles pin it: one that turns away and back again is
counted, one that only turns away is not, and one that only grows its features (as 32 un-normalised residual blocks
do, hundreds of times over) does not move at all."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from lab.analysis.retransformation import standardised_distances
from lab.reproduce.droppath import figure3_curve, figure3_measure, figure3_verdict


class Turning(nn.Module):
    """A network on 2-D points (float32, as the grid) whose layer l is the input rotated by ``angles[l]`` and scaled
    by ``scales[l]``: h_l = s_l R(θ_l) x. On the grid (centred, equal spread along both axes) the standardised
    distance to layer 0 is exactly 2 sin(|θ_l − θ_0| / 2), whatever the scales."""

    def __init__(self, angles: list[float], scales: list[float] | None = None) -> None:
        super().__init__()
        self.angles, self.scales = angles, scales or [1.0] * len(angles)

    def forward_intermediates(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        states = []
        for angle, scale in zip(self.angles, self.scales, strict=True):
            c, s = math.cos(angle), math.sin(angle)
            states.append(scale * x @ torch.tensor([[c, s], [-s, c]], dtype=x.dtype))
        return states[-1], states


def test_the_distance_is_the_chord_of_the_rotation_whatever_the_scale():
    angles = [0.0, 0.3, 0.9, 1.4]
    expected = [2 * math.sin(a / 2) for a in angles]
    assert figure3_curve(Turning(angles)) == pytest.approx(expected, abs=1e-6)
    grown = Turning(angles, [1.0, 10.0, 300.0, 1000.0])  # the raw distance would grow ×1,000, monotonically
    assert figure3_curve(grown) == pytest.approx(expected, abs=1e-6)


def test_a_network_that_re_transforms_is_counted_and_one_that_does_not_is_not():
    """Away 1.2 rad and back to 0.2, then away again to 1.0: of the path 1.2 + 1.0 + 0.8 rad (in chord lengths), the
    middle stretch heads back. Steadily away, or steadily away while growing: nothing heads back."""
    detour = Turning([0.0, 0.6, 1.2, 0.7, 0.2, 0.6, 1.0])
    chord = [2 * math.sin(a / 2) for a in detour.angles]
    steps = np.diff(chord)
    assert figure3_measure(detour) == pytest.approx(-steps[steps < 0].sum() / np.abs(steps).sum(), abs=1e-6)
    assert figure3_measure(detour) > 0.3
    assert figure3_measure(Turning([0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2])) == pytest.approx(0.0, abs=1e-9)
    assert figure3_measure(Turning([0.0, 0.2, 0.4, 0.6], [1.0, 3.0, 50.0, 900.0])) == pytest.approx(0.0, abs=1e-9)


def test_standardised_distances_of_known_features():
    """Centring removes a shift, the scale of each layer is gone, and features uncorrelated with layer 0's are √2
    away; a layer constant over the inputs has no configuration to compare (NaN)."""
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(size=(500, 3)))
    other = torch.from_numpy(rng.normal(size=(500, 3)))
    d = standardised_distances(torch.stack([x, 5 * x + 2, other, torch.ones_like(x)]))
    assert d[:2] == pytest.approx([0.0, 0.0], abs=1e-12)
    assert d[2] == pytest.approx(math.sqrt(2), abs=0.1) and math.isnan(d[3])


def test_the_verdict_pairs_trained_with_initialisation_and_needs_a_learned_spiral():
    values = {"trained": [0.05, 0.06, 0.04, 0.05], "initialisation": [0.02, 0.03, 0.02, 0.02],
              "test accuracy": [0.99] * 4}
    verdict = figure3_verdict(values)
    assert verdict.verdict == "holds" and verdict.stats.effect == pytest.approx(0.0275)
    unlearned = figure3_verdict({**values, "test accuracy": [0.6] * 4})
    assert unlearned.verdict == "not measurable" and "not 0.9" in unlearned.reason
