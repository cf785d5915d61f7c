"""Residual Alignment statistics of a batch of inputs in one call: σ, alignment scores, matrices and baseline.

What a page of *Residual Alignment: Uncovering the Mechanisms of Residual Networks* plots for RA2–RA4, at every
input x_1 … x_N and block i: the top-k singular values of the residual Jacobian J_i(x) (RA3, RA4), the alignment
score of U_{j,k}ᵀ J_i V_{j,k} for every pair of blocks (RA2), the k × k matrices themselves for the first inputs,
and the chance level of the score for Haar-random bases. The per-input path of :mod:`lab.analysis.alignment`
(``jacobian_svds`` + ``alignment_grid`` on one input at a time, exact ``torch.linalg.svd``) gives the same numbers;
this module computes them for the whole batch at once.

Route, for blocks with max(D_out, D_in) ≤ ``dense_max_dim`` (FC nets, small conv stages), per chunk of inputs:

1. dense Jacobians of all its inputs × all blocks of one shape (:func:`~lab.analysis.jacobian.residual_jacobians`,
   forward mode over a basis shared by the batch), written into one buffer reused for every chunk;
2. per input (its L Jacobians fit in the CPU cache), the top-k SVD of all L at once by
   :func:`~lab.analysis.svd.block_krylov_svd`: block Lanczos with full reorthogonalisation, Rayleigh–Ritz, and
   a residual check ‖Jᵀu − σv‖ ≤ 1e-3 · σ for each of the k triplets, which bounds each σ's relative error by
   1e-3 to first order (measured: ~1e-6 for σ, ~1e-5 for the scores);
3. the alignment matrices of that input from one product J [L·D_out, D_in] · [V_1 … V_L] [D_in, L·k] and, per
   basis j, U_jᵀ applied to its column block.

Measured (``bench/jacobians.py`` case a: 16 blocks, D = 512, 64 inputs, k = 30, untrained model, 2 CPU cores):
the per-input path takes ~43 s (Jacobians 7.5 s, ``torch.linalg.svd`` 33 s, grids 2 s), this one ~12–14 s
(Jacobians ~4 s, Krylov SVDs ~6 s of which 1.5 s orthogonalisation and 1.1 s ``eigh`` of the 152 × 152
Rayleigh–Ritz matrices, alignment products and baseline ~2 s), with σ and scores within 2e-5 of it. Top-30 SVD
alternatives per 1024 of these Jacobians (their spectra are flat: σ_1/σ_30 ≈ 1.35, neighbours down to 0.07 %
apart; one quiet run): ``torch.linalg.svd`` 37 s; batched ``eigh`` of J Jᵀ 34 s in float64, 17 s in float32;
``randomized_svd`` with T = 20 19 s and 1.5e-3 off in the scores (T = 60: 54 s); ``block_krylov_svd`` 5.4 s
with block 8, 6.4 s with block 16. The route is near the machine's floor: forming J, the Krylov products and the
alignment products are ~0.27 + 0.28 + 0.26 TFLOP, ~8 s at the 100 GFLOP/s a large float32 product reaches
here, which is why the 10 s target of that case is not met.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from lab.analysis.alignment import alignment_score, haar_bases
from lab.analysis.jacobian import jacobian_layouts, jacobian_operator, residual_jacobians
from lab.analysis.svd import LinearOperator, block_krylov_svd
from lab.analysis.token_jacobian import check_positions, token_jacobian_operator, token_jacobians
from lab.hooks import eval_mode

__all__ = ["alignment_stats"]

_CHUNK_ELEMENTS = 2**26  # Jacobian entries per chunk of inputs (256 MB in float32: 16 inputs × 16 blocks × 512²)
_CACHE_ELEMENTS = 2**22  # Jacobian entries per Krylov SVD call (16 MB in float32: half a 32 MB L3 cache)
_TOL = 1e-3  # relative residual of every top-k triplet (block_krylov_svd's tol)

Bases = tuple[Tensor, Tensor]  # Haar-random U [T, m, k], V [T, n, k] for the baseline trials


def _tiles(JV: Tensor, U: Tensor, out: Tensor) -> Tensor:
    """Alignment matrices U_jᵀ J_i V_j into ``out [s, L, L, k, k]`` for s inputs, from J_i [V_1 … V_L]
    ``[s, L·m, L·k]`` and U ``[s, L, m, k]``: per basis j one batched product with the strided column block j of
    every J_i, so no permuted copy of JV is made."""
    s, L, m, k = U.shape
    JV = JV.reshape(s, L, m, L, k)
    for j in range(L):
        out[:, :, j] = U[:, j, None].mT @ JV[:, :, :, j]  # [s, 1, k, m] @ [s, L, m, k]
    return out


class _Chunk(NamedTuple):
    """Results for the inputs ``start … start + len(S) - 1`` and one group of equally shaped blocks (Lg)."""

    start: int
    S: Tensor  # [c, Lg, k]
    tiles: Tensor  # [c, Lg, Lg, k, k]
    trials: dict[int, Tensor]  # baseline trial t -> scores [Lg]


def _trial_scores(J_apply: Callable[[Tensor], Tensor], U_t: Tensor, V_t: Tensor,
                  trials: Sequence[int]) -> dict[int, Tensor]:
    """Baseline score of every block of a group at one input for the given trials: ``{t: [Lg]}``.

    ``J_apply(X [n, c])`` returns the group's J_i X stacked ``[Lg, m, c]``; all trials share one call.
    """
    if not trials:
        return {}
    k = U_t.shape[-1]
    JV = J_apply(torch.cat([V_t[t] for t in trials], dim=1))  # [Lg, m, T·k]
    out = {}
    for col, t in enumerate(trials):
        A = U_t[t].mT @ JV[..., col * k:(col + 1) * k]  # [Lg, k, k]
        out[t] = alignment_score(A)
    return out


def _dense_chunks(jacobians: Callable[[Tensor, Tensor | None], Tensor], x: Tensor, rows_per_input: int, Lg: int,
                  shape: tuple[int, int], k: int, bases: Bases, seed: int) -> Iterator[_Chunk]:
    """Dense path: the Jacobians of a chunk of inputs (``jacobians(xs, out)`` → ``[rows, Lg, m, n]``, R rows per
    input), then, a few rows at a time (as many as fit in cache), one batched Krylov SVD of all their Jacobians and
    one alignment product per row."""
    m, n = shape
    R, T = rows_per_input, len(bases[0])
    N = len(x) * R  # rows: inputs, or (input, token position) pairs
    per_row = Lg * m * n
    step = min(len(x), max(1, _CHUNK_ELEMENTS // (per_row * R)))  # inputs per chunk of Jacobians
    sub = min(step * R, max(1, _CACHE_ELEMENTS // per_row))  # rows per Krylov SVD call
    dim = J = JV = None  # J and JV are buffers reused over the chunks: fresh memory costs page faults
    for first in range(0, len(x), step):
        xs = x[first:first + step]
        start = first * R
        reuse = J if J is not None and len(J) == len(xs) * R else None
        J = jacobians(xs, reuse).reshape(len(xs) * R, Lg, m, n)
        if JV is None:
            JV = J.new_empty(sub, Lg * m, Lg * k)
            U_t, V_t = bases[0].to(J.device, J.dtype), bases[1].to(J.device, J.dtype)
        S, tiles, trials = J.new_empty(len(J), Lg, k), J.new_empty(len(J), Lg, Lg, k, k), {}
        for a in range(0, len(J), sub):
            Js = J[a:a + sub]  # [s, Lg, m, n]
            svd = block_krylov_svd(Js, k, dim=dim, tol=_TOL, seed=seed)
            dim = svd.dim  # the Krylov dimension these spectra need: the next inputs start there
            S[a:a + sub] = svd.S
            Vcat = svd.V.permute(0, 2, 1, 3).reshape(len(Js), n, Lg * k)  # [V_1 … V_Lg] per row
            JV_s = torch.matmul(Js.reshape(len(Js), Lg * m, n), Vcat, out=JV[:len(Js)])
            _tiles(JV_s, svd.U, tiles[a:a + sub])
            for b, Jb in enumerate(Js.reshape(len(Js), Lg * m, n), start=start + a):
                own = [t for t in range(T) if t % N == b]  # trial t is evaluated at row t mod N
                trials.update(_trial_scores(lambda X, Jb=Jb: (Jb @ X).reshape(Lg, m, -1), U_t, V_t, own))
        yield _Chunk(start, S, tiles, trials)


def _operator_chunks(operators: Callable[[int], list[LinearOperator]], rows: int, shape: tuple[int, int], k: int,
                     bases: Bases, seed: int) -> Iterator[_Chunk]:
    """Operator path: per row (an input, or an input at one token position), each block's J as a jvp/vjp operator
    (``operators(row)``), Krylov SVD, alignment products."""
    m, N, T = shape[0], rows, len(bases[0])
    dim = None
    for row in range(N):
        ops = operators(row)
        Lg = len(ops)
        svds = []
        for op in ops:
            svds.append(block_krylov_svd(op, k, dim=dim, tol=_TOL, seed=seed))
            dim = svds[-1].dim
        work = svds[0].S.dtype
        U = torch.stack([s.U for s in svds])  # [Lg, m, k]
        Vcat = torch.cat([s.V for s in svds], dim=1)  # [n, Lg·k]

        def apply(X: Tensor, ops: list[LinearOperator] = ops, work: torch.dtype = work) -> Tensor:
            return torch.stack([op.matmat(X.to(op.dtype)).to(work) for op in ops])  # J_i X of each block: [Lg, m, c]

        tiles = _tiles(apply(Vcat).reshape(1, Lg * m, Lg * k), U[None], U.new_empty(1, Lg, Lg, k, k))
        own = [t for t in range(T) if t % N == row]
        trials = _trial_scores(apply, bases[0].to(U.device, work), bases[1].to(U.device, work), own)
        yield _Chunk(row, torch.stack([s.S for s in svds])[None], tiles, trials)


def alignment_stats(model: nn.Module, x: Tensor, k: int, *, grid_inputs: int = 1, baseline_trials: int = 8,
                    dense_max_dim: int = 2048, seed: int = 0, positions: Sequence[int] | None = None,
                    progress: Callable[[int, int], None] | None = None) -> dict[str, Tensor]:
    """σ, alignment scores, alignment matrices and random baseline of every block at every input of a batch.

    Runs in eval mode (BatchNorm running statistics, no drop path; every module's training flag is restored) and
    without autograd history. Each block's top-k SVD is accurate to a relative residual of 1e-3 (see the module
    docstring); within a group of equally shaped blocks the start block of the Krylov SVD is shared (``seed``).

    Args:
        model: a lab model or adapter with ``forward_intermediates`` and ``iter_blocks`` (``FCResNet``,
            ``ConvResNet``, ``ResidualMLP``, timm adapters).
        x: inputs ``[N, ...]``, on the model's device.
        k: singular triplets per block, 1 ≤ k ≤ the smallest D_out or D_in of any block.
        grid_inputs: number of leading inputs whose alignment matrices are returned (0 … N).
        baseline_trials: Haar-random basis pairs per block: :func:`~lab.analysis.alignment.haar_bases` with
            ``seed``, the pairs ``random_baseline`` draws (one draw per block shape), and
            trial t is evaluated at input t mod N, so the baseline costs ``baseline_trials`` products per block
            whatever N; for N = 1 it equals ``random_baseline(J_i, k, trials=baseline_trials, seed=seed)``.
        dense_max_dim: largest max(D_out, D_in) whose Jacobians are formed densely; larger blocks use jvp / vjp
            operators, one input at a time.
        seed: seed of the baseline's bases and of the Krylov start block.
        positions: for a sequence model (states ``[B, T, D]``), the token positions whose per-token Jacobians
            are analysed (:mod:`lab.analysis.token_jacobian`): every (input, position) pair is then one row of the
            results, ``b · P + p``, and N below is ``len(x) · P``. None: each block's Jacobian over its whole
            state.
        progress: called as ``progress(done, total)`` after each chunk with the (input, block) Jacobians done out
            of N · L (a progress bar's feed).

    Returns:
        float32 CPU tensors: ``sigma [N, L, k]`` (descending), ``scores [N, L, L]`` (row i = Jacobian, column j =
        basis, as :func:`~lab.analysis.alignment.alignment_grid`; the diagonal is 1), ``grid [grid_inputs, L, L,
        k, k]`` (U_{j,k}ᵀ J_i V_{j,k}), ``baseline [L]`` and ``baseline_std [L]`` (mean and sample std over the
        trials; std 0 for one trial) and ``baseline_trials [baseline_trials, L]`` (each trial's score). Pairs of
        blocks whose Jacobians act on different spaces (their input or output layouts differ, as between conv
        stages, even where the sizes agree) are NaN in ``scores`` and ``grid``.

    Raises:
        ValueError: if k is out of range, x is empty, grid_inputs is not in 0 … N, or baseline_trials < 1.
    """
    if len(x) < 1:
        raise ValueError("x must hold at least one input")
    if positions is None:
        layouts = jacobian_layouts(model, x)
        R = 1
    else:
        with torch.no_grad(), eval_mode(model):
            first = model.forward_intermediates(x[:1], intermediates_only=True)
        tokens, width = first[0].shape[1:]
        positions = check_positions(positions, tokens)
        layouts = [((width,), (width,))] * (len(first) - 1)  # one token's state to its own
        R = len(positions)
    N = len(x) * R
    if not 0 <= grid_inputs <= N:
        raise ValueError(f"grid_inputs must be in 0 … {N} (the number of inputs), got {grid_inputs}")
    if baseline_trials < 1:
        raise ValueError(f"baseline_trials must be >= 1, got {baseline_trials}")
    L = len(layouts)
    smallest = min(math.prod(s) for layout in layouts for s in layout)
    if not 1 <= k <= smallest:
        raise ValueError(f"k={k} must satisfy 1 <= k <= {smallest}, the smallest dimension of a block's Jacobian")
    groups: dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]] = {}  # blocks acting on the same spaces
    for i, layout in enumerate(layouts):
        groups.setdefault(layout, []).append(i)

    nan = float("nan")
    sigma = torch.empty(N, L, k)
    scores = torch.full((N, L, L), nan)
    grid = torch.full((grid_inputs, L, L, k, k), nan)
    trial_scores = torch.empty(baseline_trials, L)
    done = 0
    with eval_mode(model), torch.no_grad():
        for (out_shape, in_shape), blocks in groups.items():
            m, n = math.prod(out_shape), math.prod(in_shape)
            bases = haar_bases(m, n, k, baseline_trials, seed=seed)  # as random_baseline draws them
            if max(m, n) <= dense_max_dim:
                if positions is None:
                    def jacobians(xs: Tensor, out: Tensor | None, blocks: list[int] = blocks) -> Tensor:
                        return residual_jacobians(model, xs, blocks=blocks, chunk=len(xs), out=out)
                else:
                    def jacobians(xs: Tensor, out: Tensor | None, blocks: list[int] = blocks) -> Tensor:
                        return token_jacobians(model, xs, positions, blocks=blocks, out=out)
                chunks = _dense_chunks(jacobians, x, R, len(blocks), (m, n), k, bases, seed)
            else:
                def operators(row: int, blocks: list[int] = blocks) -> list[LinearOperator]:
                    one = x[row // R:row // R + 1]
                    return [jacobian_operator(model, one, i) if positions is None else
                            token_jacobian_operator(model, one, positions[row % R], i) for i in blocks]
                chunks = _operator_chunks(operators, N, (m, n), k, bases, seed)
            rows, cols = torch.tensor(blocks)[:, None], torch.tensor(blocks)[None, :]
            for chunk in chunks:
                stop = chunk.start + len(chunk.S)
                sigma[chunk.start:stop, blocks] = chunk.S.float().cpu()
                scores[chunk.start:stop, rows, cols] = alignment_score(chunk.tiles).float().cpu()
                for g in range(chunk.start, min(stop, grid_inputs)):
                    grid[g, rows, cols] = chunk.tiles[g - chunk.start].float().cpu()
                for t, s in chunk.trials.items():
                    trial_scores[t, blocks] = s.float().cpu()
                done += len(chunk.S) * len(blocks)
                if progress is not None:
                    progress(done, N * L)
    std = trial_scores.double().std(dim=0) if baseline_trials > 1 else torch.zeros(L, dtype=torch.float64)
    return {"sigma": sigma, "scores": scores, "grid": grid, "baseline": trial_scores.double().mean(dim=0).float(),
            "baseline_std": std.float(), "baseline_trials": trial_scores}
