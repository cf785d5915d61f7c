"""Per-token residual Jacobians of a Transformer decoder: each is the D × D block of the step's full Jacobian at that
token, dense and matrix-free agree, and Residual Alignment reads every (input, position) pair as one input."""

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from lab.analysis.alignment_stats import alignment_stats  # noqa: E402
from lab.analysis.residual_alignment import alignment_reasons, residual_alignment  # noqa: E402
from lab.analysis.token_jacobian import check_positions, token_jacobian_operator, token_jacobians  # noqa: E402
from lab.nn.hf import HFTransformer  # noqa: E402

T, D = 6, 16


@pytest.fixture(scope="module")
def gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=D, n_head=2, vocab_size=40, n_positions=T, bos_token_id=0,
                                     eos_token_id=0)
    return HFTransformer(transformers.GPT2LMHeadModel(config).eval())


def test_each_is_the_block_of_the_full_jacobian_at_its_token(gpt2):
    ids = torch.randint(0, 40, (2, T))
    J = token_jacobians(gpt2, ids, [1, -1])
    assert J.shape == (4, 4, D, D)
    with torch.no_grad():
        states = gpt2.forward_intermediates(ids, intermediates_only=True)
    for i, (_, step) in enumerate(gpt2.iter_blocks()):
        for b in range(2):
            full = torch.func.jacrev(lambda h, step=step: step.branch(h[None])[0])(states[i][b])  # [T, D, T, D]
            for p, t in enumerate((1, T - 1)):
                torch.testing.assert_close(J[b * 2 + p, i], full[t, :, t, :], atol=1e-5, rtol=1e-4)
    first_attention = torch.func.jacrev(lambda h: gpt2._steps[0][1].branch(h[None])[0])(states[0][0])
    assert first_attention[T - 1, :, 0, :].abs().max() > 1e-4, "attention mixes tokens: the full map is not its blocks"
    op = token_jacobian_operator(gpt2, ids[:1], -1, 2)
    X = torch.randn(D, 3)
    torch.testing.assert_close(op.matmat(X), J[1, 2] @ X, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(op.rmatmat(X), J[1, 2].T @ X, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="distinct indices into 6 tokens"):
        check_positions([0, 6], T)


def test_alignment_reads_each_input_and_position_as_one_input_dense_and_matrix_free_alike(gpt2):
    ids = torch.randint(0, 40, (3, T))
    dense = alignment_stats(gpt2, ids, 4, positions=[2, -1], baseline_trials=3)
    assert dense["sigma"].shape == (6, 4, 4) and dense["scores"].shape == (6, 4, 4)
    J = token_jacobians(gpt2, ids, [2, -1])
    np.testing.assert_allclose(dense["sigma"][3, 1], torch.linalg.svdvals(J[3, 1])[:4], rtol=2e-3)
    free = alignment_stats(gpt2, ids, 4, positions=[2, -1], baseline_trials=3, dense_max_dim=1)
    np.testing.assert_allclose(free["sigma"], dense["sigma"], rtol=2e-3)
    np.testing.assert_allclose(free["scores"], dense["scores"], atol=2e-3)


def test_ra_of_a_language_model_per_token_says_what_has_no_classes(gpt2):
    ids = torch.randint(0, 40, (4, T))
    out = residual_alignment(gpt2, ids, torch.zeros(4, dtype=torch.long), k=4, num_classes=0, positions=[-2, -1],
                             fit_start=0)
    assert out["traj_pca"].shape == (5, 8, 2) and out["straightness_per_input"].shape == (8,)
    assert np.isfinite(out["align_offdiag"]) and np.isfinite(out["straightness"])
    assert np.isfinite(out["inv_sigma1_slope"]) and (int(out["fit_start"]), int(out["fit_stop"])) == (0, 4)
    assert np.isnan(out["topk_ratio"]) and np.isnan(out["nc1"]).all()
    reasons = alignment_reasons(out)
    assert "no classes" in reasons["topk_ratio"] and "none" in reasons["nc"]
