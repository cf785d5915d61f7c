"""Re-transformation across layers (ResidualDroppath's Figure 3 measure) on streams whose answers are known."""

import math

import numpy as np
import pytest
import torch

from lab.analysis.retransformation import backtrack, retransformation
from lab.analysis.similarity import layer_distances, linear_cka


def test_a_stream_that_goes_away_and_comes_back_is_measured_exactly():
    x = torch.randn(16, 5, dtype=torch.float64)
    out = retransformation([x, 2 * x, x, 3 * x])
    assert out["to_input"] == pytest.approx([0.0, 1.0, 0.0, 2.0])
    assert math.isnan(out["to_previous"][0]) and out["to_previous"][1:] == pytest.approx([1.0, 0.5, 2.0])
    assert float(out["backtrack"]) == pytest.approx(1 / 4)  # away 1, back 1, away 2: one step of four back
    assert out["cka"] == pytest.approx(np.ones((4, 4)))  # scaling changes no CKA
    assert float(out["inputs"]) == 16


def test_a_stream_moving_steadily_away_never_backtracks():
    x = torch.randn(32, 8, dtype=torch.float64)
    d = torch.randn(32, 8, dtype=torch.float64)
    out = retransformation([x + 0.1 * i * d for i in range(6)])
    assert float(out["backtrack"]) == 0.0
    assert np.all(np.diff(out["to_input"]) > 0)


def test_distances_and_cka_match_the_playgrounds_measures_where_widths_match():
    torch.manual_seed(0)
    states = [torch.randn(20, 12) for _ in range(5)]
    out = retransformation(states)
    dist = layer_distances(states).double()
    norm0 = float(torch.linalg.vector_norm(states[0].double()))
    assert out["to_input"] == pytest.approx((dist[0] / norm0).numpy(), rel=1e-5)
    assert out["cka"] == pytest.approx(linear_cka(states).double().numpy(), abs=1e-6)


def test_a_projection_starts_a_stage_and_cka_compares_layers_of_any_width():
    torch.manual_seed(1)
    x = torch.randn(10, 4, dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.randn(9, 9, dtype=torch.float64))
    wide = x @ q[:4]  # [10, 9]: the same geometry in a wider space
    out = retransformation([x, 1.5 * x, wide, 2 * wide])
    assert list(out["stage_start"]) == [0, 0, 2, 2]
    assert math.isnan(out["to_previous"][2]) and out["to_previous"][3] == pytest.approx(1.0)
    assert out["to_input"] == pytest.approx([0.0, 0.5, 0.0, 1.0])
    assert out["cka_to_input"] == pytest.approx([1.0, 1.0, 1.0, 1.0])  # rotation into more dimensions: same CKA
    assert float(out["backtrack"]) == 0.0  # the jump between stages is no step back


def test_backtrack_ignores_steps_across_segments_and_flat_curves():
    assert backtrack(np.array([0.0, 2.0, 1.0, 5.0]), np.array([0, 0, 1, 1])) == pytest.approx(0.0)
    assert math.isnan(backtrack(np.zeros(4)))


def test_too_few_inputs_or_states_and_mismatched_batches_are_refused():
    with pytest.raises(ValueError, match="two inputs"):
        retransformation([torch.randn(1, 3), torch.randn(1, 3)])
    with pytest.raises(ValueError, match="two states"):
        retransformation([torch.randn(4, 3)])
    with pytest.raises(ValueError, match="holds 3 inputs"):
        retransformation([torch.randn(4, 3), torch.randn(3, 3)])
