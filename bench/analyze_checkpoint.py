"""Time and peak memory of analysing a network from its weights file: Residual Alignment, rank and re-transformation.

What ``lab analyze alignment --model torchvision:resnet50 --weights FILE`` and ``lab.analyze`` cost on this machine,
for torchvision's ResNet-18 and ResNet-50 at 64 and 224 px. Each case runs in its own process (so its peak resident
memory is its own): the network is built, its weights written as safetensors and read back through
:func:`lab.nn.networks.open_network` (the importer's path), then

- **RA**: :func:`lab.analysis.residual_alignment.residual_alignment` at ``--inputs`` inputs, top ``--k`` triplets of
  every block's residual Jacobian (dense up to D = 2,048, else the chunked jvp/vjp operators with the block Krylov
  SVD), 8 random-baseline trials, NC1–NC4 at the same inputs;
- **rank**: what ``lab analyze rank`` and ``retransformation`` compute: every layer's pooled features
  (:func:`lab.reports.layer_rank.layer_features`) at ``--rank-inputs`` training and as many test inputs, their
  rank (the paper's Eq. 6 and effective rank) and a ridge probe's accuracy
  (:func:`lab.analysis.rank_sweep.layer_rank_metrics`), and
  :func:`lab.analysis.retransformation.retransformation` of the stream at ``--rank-inputs`` inputs.

``--entry-points`` measures the whole of an analysis from a weights file instead, as a user runs it: a timm ResNet-18
saved as timm builds it (three channels, ten classes) analysed on the digits (``lab analyze alignment --model
timm:resnet18 --weights FILE``) by the command, a process of its own, and by ``lab.analyze`` in a process whose torch
was left on one thread, as ``lab train`` run in a notebook leaves it: with the command's threads (the default) and on
that one thread (what ``lab.analyze`` did before it took the command's). Each runs in a child process; the table
gives wall-clock and CPU seconds (the CPU time tells a busy machine from a slow analysis), and the bytes each call
left in its run folder's ``checkpoints/``.

Run: ``python bench/analyze_checkpoint.py [--inputs 2] [--k 10] [--rank-inputs 64] [--cases resnet18@64,...]`` or
``python bench/analyze_checkpoint.py --entry-points [--inputs 8] [--k 8] [--image-size 32]``.
The table gives seconds and peak MB of each part, the ratio of each case's total time to the reference case
(ResNet-18 at 64 px, measured in the same run), the largest Jacobian (D), and the numbers themselves: RA2's mean
off-diagonal alignment score beside its random baseline, and the last state's rank.

The inputs are Gaussian noise images and the networks untrained (nothing is downloaded; no ImageNet here): the
figures are the cost of the analysis, which does not depend on what the weights learned, except through the
Krylov SVD's iterations (flat spectra, as here, are its worst case).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import table  # noqa: E402

CASES = ("resnet18@64", "resnet50@64", "resnet18@224", "resnet50@224")
REFERENCE = CASES[0]


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_case(case: str, inputs: int, k: int, rank_inputs: int) -> dict:
    """One case, in this process: the numbers and costs as a dict."""
    import torch
    from safetensors.torch import save_file

    from lab.analysis.jacobian import jacobian_shapes
    from lab.analysis.rank_sweep import layer_rank_metrics
    from lab.analysis.residual_alignment import residual_alignment
    from lab.analysis.retransformation import retransformation
    from lab.hooks import eval_mode
    from lab.nn.networks import build_network, open_network
    from lab.reports.layer_rank import layer_features

    arch, px = case.split("@")
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        weights = Path(tmp) / f"{arch}.safetensors"
        save_file(build_network(f"torchvision:{arch}", num_classes=10).state_dict(), str(weights))
        start = time.perf_counter()
        view, report = open_network(f"torchvision:{arch}", weights, num_classes=10)
        load_s = time.perf_counter() - start
    size = int(px)
    x = torch.randn(max(inputs, 2 * rank_inputs), 3, size, size)
    y = torch.arange(len(x)) % 10
    d_max = max(max(s) for s in jacobian_shapes(view, x[:1]))

    start = time.perf_counter()
    ra = residual_alignment(view, x[:inputs], y[:inputs], k, nc_x=x[:inputs], nc_y=y[:inputs], num_classes=10,
                            fit_start=0, seed=0)
    ra_s, ra_peak = time.perf_counter() - start, _peak_mb()

    start = time.perf_counter()
    n = rank_inputs
    layers = layer_rank_metrics(layer_features(view, x[:n]), y[:n], layer_features(view, x[n:2 * n]), y[n:2 * n],
                                num_classes=10)
    with torch.no_grad(), eval_mode(view):
        moved = retransformation(view.forward_intermediates(x[:n], intermediates_only=True))
    rank_s, peak = time.perf_counter() - start, _peak_mb()
    ranks = layers["eq6_entropy"]
    return {"case": case, "blocks": len(ranks) - 1, "d_max": d_max, "load_s": load_s, "keys": report.text(),
            "ra_s": ra_s, "ra_peak_mb": ra_peak, "rank_s": rank_s, "peak_mb": peak,
            "align": float(ra["align_offdiag"]), "baseline": float(ra["baseline_mean"]),
            "sigma1_first_last": [float(ra["sigma"][0, 0]), float(ra["sigma"][-1, 0])],
            "rank_last": float(ranks[-1]), "rank_first": float(ranks[0]), "probe_last": float(layers["probe_acc"][-1]),
            "backtrack": float(moved["backtrack"])}


ENTRY_POINTS = ("command", "lab.analyze", "lab.analyze, 1 thread")


def entry_point(case: str, weights: str, runs: str, inputs: int, k: int, image_size: int) -> None:
    """One entry point's analysis, in this process (a child of :func:`entry_points`)."""
    settings = [f"data.image_size={image_size}"] if image_size else []
    if case == "command":
        from lab.cli import main as command

        sets = [arg for item in settings for arg in ("--set", item)]
        sys.exit(command(["analyze", "alignment", "--model", "timm:resnet18", "--weights", weights, *sets, "--inputs",
                          str(inputs), "--k", str(k), "--nc-inputs", "100", "--runs-dir", runs, "--no-progress"]))
    import torch

    import lab

    torch.set_num_threads(1)  # as `lab train` in the same process leaves it
    lab.analyze("timm:resnet18", weights=weights, settings=settings, analyses=("alignment",), inputs=inputs, k=k,
                nc_inputs=100, runs_dir=runs, threads=1 if case.endswith("1 thread") else None)


def entry_points(inputs: int, k: int, image_size: int) -> None:
    """The table of :data:`ENTRY_POINTS`: wall-clock and CPU seconds, and the bytes left in ``checkpoints/``."""
    import resource

    import timm
    import torch

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        weights = Path(tmp) / "resnet18.pt"
        torch.save(timm.create_model("resnet18", pretrained=False, num_classes=10).state_dict(), weights)
        print(f"timm resnet18 (3 channels, 10 classes), {weights.stat().st_size / 1e6:.1f} MB; digits at "
              f"{image_size or 224} px; RA at {inputs} inputs, K = {k}, NC at 100; {os.cpu_count()} CPUs", flush=True)
        for case in ENTRY_POINTS:
            runs = Path(tmp) / case.replace(" ", "-").replace(",", "")
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            child = subprocess.run([sys.executable, __file__, "--entry", case, "--weights", str(weights), "--runs",
                                    str(runs), "--inputs", str(inputs), "--k", str(k), "--image-size",
                                    str(image_size)], capture_output=True, text=True, cwd=ROOT)
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if child.returncode:
                print(f"{case}: failed\n{child.stderr[-2000:]}", flush=True)
                continue
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            copied = sum(f.stat().st_size for f in runs.glob("*/checkpoints/*"))
            rows.append([case, f"{wall:.1f}", f"{cpu:.1f}", f"{copied:,}"])
            print(f"{case}: {wall:.1f} s", flush=True)
    print(table(["entry point", "wall s", "CPU s", "bytes in checkpoints/"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=2, help="inputs of the RA analysis (default 2)")
    parser.add_argument("--k", type=int, default=10, help="singular triplets per block (default 10, the paper's "
                                                          "smallest K)")
    parser.add_argument("--rank-inputs", type=int, default=64, help="training (and test) inputs of the rank analysis "
                                                                     "(default 64)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma list of arch@px (default {','.join(CASES)})")
    parser.add_argument("--case", default=None, help=argparse.SUPPRESS)  # one case, in a child process
    parser.add_argument("--entry-points", action="store_true", help="time the command against lab.analyze on a "
                                                                    "weights file instead (see the module)")
    parser.add_argument("--image-size", type=int, default=32, help="--entry-points: the digits' side (0: the "
                                                                   "network's own, 224)")
    for hidden in ("--entry", "--weights", "--runs"):  # one entry point, in a child process
        parser.add_argument(hidden, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.entry:
        entry_point(args.entry, args.weights, args.runs, args.inputs, args.k, args.image_size)
        return
    if args.entry_points:
        entry_points(args.inputs, args.k, args.image_size)
        return
    if args.case:
        print(json.dumps(run_case(args.case, args.inputs, args.k, args.rank_inputs)))
        return
    cases = args.cases.split(",")
    if REFERENCE not in cases:
        cases.insert(0, REFERENCE)
    print(f"torchvision ResNets, untrained, Gaussian inputs; RA at {args.inputs} inputs, K = {args.k}; rank at "
          f"{args.rank_inputs} inputs; {os.cpu_count()} CPUs", flush=True)
    results = {}
    for case in cases:
        child = subprocess.run([sys.executable, __file__, "--case", case, "--inputs", str(args.inputs), "--k",
                                str(args.k), "--rank-inputs", str(args.rank_inputs)],
                               capture_output=True, text=True, cwd=ROOT)
        if child.returncode:
            print(f"{case}: failed\n{child.stderr[-2000:]}", flush=True)
            continue
        results[case] = json.loads(child.stdout.strip().splitlines()[-1])
        print(f"{case}: done in {results[case]['ra_s'] + results[case]['rank_s']:.1f} s", flush=True)
    ref = results.get(REFERENCE)
    rows = []
    for case, r in results.items():
        total = r["ra_s"] + r["rank_s"]
        ratio = f"{total / (ref['ra_s'] + ref['rank_s']):.1f}" if ref else "n/a"
        rows.append([case, r["blocks"], f"{r['d_max']:,}", f"{r['ra_s']:.1f}", f"{r['rank_s']:.1f}", ratio,
                     f"{r['peak_mb']:,.0f}", f"{r['align']:.3f} / {r['baseline']:.3f}",
                     f"{r['rank_first']:.2f} / {r['rank_last']:.2f}", f"{r['backtrack']:.3f}"])
    print(table(["case", "blocks", "max D", "RA s", "rank s", "total / ref", "peak MB", "RA2 / baseline",
                 "rank first / last", "backtrack"], rows))


if __name__ == "__main__":
    main()
