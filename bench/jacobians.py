"""Cost of residual Jacobians and their SVDs on the CPU, against the analysis targets.

The analyses of *Residual Alignment: Uncovering the Mechanisms of Residual Networks* (§2.3–2.4).

Run: ``python bench/jacobians.py [--quick] [--threads N]``. Prints one table: time, peak resident memory, the
target and pass/fail of each case.

(a) Fig. 2-style analysis of a 16-block, D = 512 fully-connected ResNet (Type 1) over 64 inputs: every Jacobian's
    top-30 singular values and one alignment grid U_{j,30}ᵀ J_i V_{j,30} [16, 16, 30, 30] per input. Measured
    for :func:`~lab.analysis.alignment_stats.alignment_stats` (scores of all 64 grids, the first grid, and the
    8-trial random baseline) against a target of ≤ 10 s, and for the per-input reference path in the same run
    (``residual_jacobians`` for all inputs, then per input the exact ``torch.linalg.svd`` of its 16 Jacobians
    via ``jacobian_svds`` and ``alignment_grid``): the time ratio, and the largest deviation of the new numbers
    from the reference (σ relative, alignment score absolute; target ≤ 1e-3 each).
(b) Matrix-free randomized SVD, top 30 with T = 20 subspace iterations, of one conv block of Type 2 (64 channels at
    16 × 16, D = 16,384) through its jvp/vjp operator. Target: ≤ 30 s. Accuracy on a smaller conv block (16
    channels at 8 × 8, D = 1,024): the same randomized SVD against a dense exact SVD, max relative error over the
    top 30 σ (target ≤ 1e-3), and the dense-vs-operator time ratio (the reference, measured in the same run).
(c) One page snapshot: ``alignment_stats`` of an 8-block, D = 128 FC ResNet at 64 inputs, k = 20, one grid, 8
    baseline trials. Target: ≤ 1 s.

The header gives the share of the machine's CPU time other processes took during the run: timings are only
comparable when it is near 0 (intra-op threads of torch and MKL wait for each other, so on a 2-core machine a
busy neighbour can slow small LAPACK calls many times over).

Peak memory (``+peak MB``) is the rise of the process's peak resident set (VmHWM) over the resident set at the
start of the case, the peak being reset there where Linux allows it (``/proc/self/clear_refs``; else the lifetime
peak, ``ru_maxrss``). Models are untrained (random initialisation,
BatchNorm at its initial running statistics), the worst case for iterative SVDs: their spectra are flat.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path

import torch

from lab.analysis.alignment import alignment_grid, alignment_scores, jacobian_svds
from lab.analysis.alignment_stats import alignment_stats
from lab.analysis.jacobian import jacobian_operator, residual_jacobians
from lab.analysis.svd import randomized_svd
from lab.nn.resnets import ConvResNet, FCResNet

TARGET_A_S, TARGET_B_S, TARGET_C_S, TARGET_ERR = 10.0, 30.0, 1.0, 1e-3


def reset_peak() -> bool:
    """Reset the process's peak RSS; False where the kernel does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _status_mb(key: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def peak_mb() -> float:
    """Peak resident memory in MB since the last reset (or process start)."""
    peak = _status_mb("VmHWM:")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    """Resident memory now, in MB (0 where /proc is missing)."""
    return _status_mb("VmRSS:") or 0.0


def busy_cpu_s() -> float | None:
    """CPU seconds all processes have spent busy since boot (/proc/stat), None where /proc is missing."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def case_a(n_inputs: int, depth: int, width: int, k: int) -> list[tuple]:
    torch.manual_seed(0)
    model = FCResNet(depth=depth, width=width, in_dim=64).eval()
    x = torch.randn(n_inputs, 64)
    alignment_stats(model, x[:1], k)  # warm-up: first-use costs of torch.func
    tag = f"FC L={depth} D={width}, {n_inputs} inputs, k={k}"

    reset_peak()
    base = rss_mb()
    t_new, stats = timed(lambda: alignment_stats(model, x, k, grid_inputs=1, baseline_trials=8))
    peak_new = peak_mb() - base

    reset_peak()
    base = rss_mb()
    t_jac, J = timed(lambda: residual_jacobians(model, x))  # [B, L, D, D]
    t_svd = t_grid = 0.0
    sigma, scores = [], []
    for b in range(n_inputs):  # one input at a time, keeping only what the analysis keeps (S and the grid)
        dt, svds = timed(lambda b=b: jacobian_svds(J[b], k))
        t_svd += dt
        dt, grid = timed(lambda b=b, svds=svds: alignment_grid(J[b], k, svds=svds))
        t_grid += dt
        sigma.append(torch.stack([s for _, s, _ in svds]))
        scores.append(alignment_scores(grid))
    peak_old = peak_mb() - base
    t_old = t_jac + t_svd + t_grid
    sigma, scores = torch.stack(sigma), torch.stack(scores)
    err_sigma = ((stats["sigma"] - sigma).abs() / sigma).max().item()
    err_score = (stats["scores"] - scores).abs().max().item()
    return [
        ("a", f"alignment_stats (batched Krylov SVD): {tag}", t_new, peak_new, f"<= {TARGET_A_S:g} s",
         t_new <= TARGET_A_S),
        ("a", f"reference, per input: dense Jacobians {tuple(J.shape)}", t_jac, None, "", ""),
        ("a", f"  exact top-{k} SVD (torch.linalg.svd) of {n_inputs * depth} Jacobians", t_svd, None, "", ""),
        ("a", f"  {n_inputs} alignment grids [{depth}, {depth}, {k}, {k}]", t_grid, None, "", ""),
        ("a", "  reference total", t_old, peak_old, "", ""),
        ("a", "  time ratio reference / alignment_stats (value)", t_old / t_new, None, "", ""),
        ("a", f"  max rel. sigma deviation, top {k} (value)", err_sigma, None, f"<= {TARGET_ERR:g}",
         err_sigma <= TARGET_ERR),
        ("a", "  max abs. alignment score deviation (value)", err_score, None, f"<= {TARGET_ERR:g}",
         err_score <= TARGET_ERR),
    ]


def conv_block_model(channels: int, size: int) -> ConvResNet:
    torch.manual_seed(0)
    return ConvResNet(depths=(2,), channels=(channels,), in_chans=3, feature_size=size).eval()


def case_b(channels: int, size: int, small_channels: int, small_size: int, k: int, iters: int) -> list[tuple]:
    model = conv_block_model(channels, size)
    x = torch.randn(1, 3, 2 * size, 2 * size)
    reset_peak()
    base = rss_mb()
    t_op, op = timed(lambda: jacobian_operator(model, x, 1))
    t_rsvd, (_, S, _) = timed(lambda: randomized_svd(op, k, iters=iters, seed=0))
    peak = peak_mb() - base
    total = t_op + t_rsvd
    D = op.shape[0]
    rows = [("b", f"randomized SVD top-{k}, T={iters}, conv {channels}x{size}x{size} (D={D})", total, peak,
             f"<= {TARGET_B_S:g} s", total <= TARGET_B_S)]

    small = conv_block_model(small_channels, small_size)
    xs = torch.randn(1, 3, 2 * small_size, 2 * small_size)
    Ds = small_channels * small_size**2

    def dense() -> torch.Tensor:
        return torch.linalg.svdvals(residual_jacobians(small, xs, blocks=[1])[0])[:k]

    def operator() -> torch.Tensor:
        return randomized_svd(jacobian_operator(small, xs, 1), k, iters=iters, seed=0)[1]

    t_dense, s_dense = timed(dense)
    t_oper, s_oper = timed(operator)
    err = ((s_oper - s_dense).abs() / s_dense).max().item()
    rows += [
        ("b", f"  dense Jacobian + exact SVD, conv {small_channels}x{small_size}x{small_size} (D={Ds})", t_dense,
         None, "", ""),
        ("b", f"  operator + randomized SVD, same block; sigma_1/sigma_{k} = "
              f"{(s_dense[0] / s_dense[-1]).item():.3g}", t_oper, None, "", ""),
        ("b", f"  max rel. sigma error, top {k} (value)", err, None, f"<= {TARGET_ERR:g}", err <= TARGET_ERR),
        ("b", "  time ratio dense / operator (value)", t_dense / t_oper, None, "", ""),
    ]
    return rows


def case_c(n_inputs: int, depth: int, width: int, k: int) -> list[tuple]:
    torch.manual_seed(0)
    model = FCResNet(depth=depth, width=width, in_dim=64, num_classes=10).eval()
    x = torch.randn(n_inputs, 64)
    alignment_stats(model, x[:1], k)  # warm-up
    reset_peak()
    base = rss_mb()
    t, _ = timed(lambda: alignment_stats(model, x, k, grid_inputs=1, baseline_trials=8))
    peak = peak_mb() - base
    return [("c", f"page snapshot: alignment_stats, FC L={depth} D={width}, {n_inputs} inputs, k={k}", t, peak,
             f"<= {TARGET_C_S:g} s", t <= TARGET_C_S)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run, targets not meaningful")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    busy0, own0, wall0 = busy_cpu_s(), own_cpu_s(), time.perf_counter()
    if args.quick:
        rows = (case_a(n_inputs=4, depth=4, width=128, k=10) + case_b(16, 8, 8, 6, k=10, iters=20)
                + case_c(n_inputs=8, depth=4, width=64, k=8))
    else:
        rows = (case_a(n_inputs=64, depth=16, width=512, k=30) + case_b(64, 16, 16, 8, k=30, iters=20)
                + case_c(n_inputs=64, depth=8, width=128, k=20))
    busy1, own1, wall1 = busy_cpu_s(), own_cpu_s(), time.perf_counter()
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    others = "?" if busy0 is None or busy1 is None else \
        f"{100 * max(0.0, (busy1 - busy0) - (own1 - own0)) / ((os.cpu_count() or 1) * (wall1 - wall0)):.0f}%"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {load}, other processes' "
          f"share of the CPUs during the run {others}{' (--quick: targets not meaningful)' if args.quick else ''}")
    head = f"{'case':<5}{'what':<78}{'time s / value':>15}{'+peak MB':>10}  {'target':<10}{'pass':<5}"
    print(head)
    print("-" * len(head))
    for case, what, value, peak, target, ok in rows:
        peak_s = f"{peak:.0f}" if peak is not None else ""
        ok_s = "" if ok == "" else ("PASS" if ok else "FAIL")
        print(f"{case:<5}{what:<78}{value:>15.4g}{peak_s:>10}  {target:<10}{ok_s:<5}")


if __name__ == "__main__":
    main()
