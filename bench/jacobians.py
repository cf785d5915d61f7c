"""Cost of residual Jacobians and their SVDs on the CPU, against the analysis targets.

The analyses of *Residual Alignment: Uncovering the Mechanisms of Residual Networks* (§2.3–2.4).

Run: ``python bench/jacobians.py [--quick] [--threads N]``. Prints one table: time, peak resident memory, the
target and pass/fail of each case.

(a) Fig. 2-style analysis of a 16-block, D = 512 fully-connected ResNet (Type 1) over 64 inputs: every dense
    Jacobian (``residual_jacobians``, [64, 16, 512, 512]), the exact top-30 SVD of each, and one alignment grid
    U_{j,30}ᵀ J_i V_{j,30} per input. Target: ≤ 10 s in all.
(b) Matrix-free randomized SVD, top 30 with T = 20 subspace iterations, of one conv block of Type 2 (64 channels at
    16 × 16, D = 16,384) through its jvp/vjp operator. Target: ≤ 30 s. Accuracy on a smaller conv block (16
    channels at 8 × 8, D = 1,024): the same randomized SVD against a dense exact SVD, max relative error over the
    top 30 σ (target ≤ 1e-3), and the dense-vs-operator time ratio (the reference, measured in the same run).

Peak memory (``+peak MB``) is the rise of the process's peak resident set (VmHWM) over the resident set at the
start of the case, the peak being reset there where Linux allows it (``/proc/self/clear_refs``; else the lifetime
peak, ``ru_maxrss``). Models are untrained (random initialisation,
BatchNorm at its initial running statistics), the worst case for randomized SVD: their spectra are flat.
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable
from pathlib import Path

import torch

from lab.analysis.alignment import alignment_grid, jacobian_svds
from lab.analysis.jacobian import jacobian_operator, residual_jacobians
from lab.analysis.svd import randomized_svd
from lab.nn.resnets import ConvResNet, FCResNet

TARGET_A_S, TARGET_B_S, TARGET_ERR = 10.0, 30.0, 1e-3


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


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def case_a(n_inputs: int, depth: int, width: int, k: int) -> list[tuple]:
    torch.manual_seed(0)
    model = FCResNet(depth=depth, width=width, in_dim=64).eval()
    x = torch.randn(n_inputs, 64)
    residual_jacobians(model, x[:1], blocks=[0])  # warm-up: first-use costs of torch.func
    reset_peak()
    base = rss_mb()
    t_jac, J = timed(lambda: residual_jacobians(model, x))  # [B, L, D, D]
    t_svd = t_grid = 0.0
    for b in range(n_inputs):  # one input at a time, keeping only what the analysis keeps (S and the grid)
        dt, svds = timed(lambda b=b: jacobian_svds(J[b], k))
        t_svd += dt
        t_grid += timed(lambda b=b, svds=svds: alignment_grid(J[b], k, svds=svds))[0]
    peak = peak_mb() - base
    total = t_jac + t_svd + t_grid
    tag = f"FC L={depth} D={width}, {n_inputs} inputs"
    return [
        ("a", f"dense Jacobians {tuple(J.shape)}", t_jac, None, "", ""),
        ("a", f"exact top-{k} SVD of {n_inputs * depth} Jacobians", t_svd, None, "", ""),
        ("a", f"{n_inputs} alignment grids [{depth}, {depth}, {k}, {k}]", t_grid, None, "", ""),
        ("a", f"total: {tag}", total, peak, f"<= {TARGET_A_S:g} s", total <= TARGET_A_S),
        ("a", "  per input (Fig. 2 unit of work)", total / n_inputs, None, "", ""),
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run, targets not meaningful")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        rows = case_a(n_inputs=4, depth=4, width=128, k=10) + case_b(16, 8, 8, 6, k=10, iters=20)
    else:
        rows = case_a(n_inputs=64, depth=16, width=512, k=30) + case_b(64, 16, 16, 8, k=30, iters=20)
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {load}"
          f"{' (--quick: targets not meaningful)' if args.quick else ''}")
    head = f"{'case':<5}{'what':<78}{'time s / value':>15}{'+peak MB':>10}  {'target':<10}{'pass':<5}"
    print(head)
    print("-" * len(head))
    for case, what, value, peak, target, ok in rows:
        peak_s = f"{peak:.0f}" if peak is not None else ""
        ok_s = "" if ok == "" else ("PASS" if ok else "FAIL")
        print(f"{case:<5}{what:<78}{value:>15.4g}{peak_s:>10}  {target:<10}{ok_s:<5}")


if __name__ == "__main__":
    main()
