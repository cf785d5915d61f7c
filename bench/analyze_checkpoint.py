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

Two Transformers, read as residual steps by :class:`lab.nn.hf.HFTransformer` (each block's attention and MLP one
step: 24 steps), at random init, built from their configs and saved with ``save_pretrained``, then read back through
:func:`lab.nn.hf.load_pretrained` (the importer's path); RA only (no rank part):

- ``gpt2``: GPT-2 small (12 layers, D = 768, 50,257-token vocabulary) on ``--gpt2-windows`` windows of
  ``--gpt2-tokens`` random token ids, RA per token position (``positions=--gpt2-positions``, ``num_classes=0``: RA3
  and neural collapse n/a), top ``--gpt2-k``. Each per-token Jacobian is 768 × 768, so it is formed densely (dense
  up to D = 2,048): 768 jvp columns per step, an attention step's cost growing with the position (causal: the
  tokens up to it): ~12 s at the last of 128 tokens and ~3 s at the 64th, an MLP step's ~1 s, on 2 idle cores;
- ``vit``: ViT-S/16 at 224 px (12 layers, D = 384, 197 tokens, 10 classes) on ``--vit-inputs`` Gaussian images, RA
  of the whole-stream Jacobian (D = 197 × 384 = 75,648: the jvp/vjp operators and the block Krylov SVD), top
  ``--vit-k``; NC1–NC4 at 20 more images (two per class; forward passes only).

``--only gpt2,vit`` (the same as ``--cases``) runs these alone, beside the reference case.

``--entry-points`` measures the whole of an analysis from a weights file instead, as a user runs it: a timm ResNet-18
saved as timm builds it (three channels, ten classes) analysed on the digits (``lab analyze alignment --model
timm:resnet18 --weights FILE``) by the command, a process of its own, and by ``lab.analyze`` in a process whose torch
was left on one thread, as ``lab train`` run in a notebook leaves it: with the command's threads (the default) and on
that one thread (what ``lab.analyze`` did before it took the command's). Each runs in a child process; the table
gives wall-clock and CPU seconds (the CPU time tells a busy machine from a slow analysis), and the bytes each call
left in its run folder's ``checkpoints/``.

Run: ``python bench/analyze_checkpoint.py [--inputs 2] [--k 10] [--rank-inputs 64] [--cases resnet18@64,...]``,
``python bench/analyze_checkpoint.py --only gpt2,vit [--gpt2-windows 1] [--gpt2-positions 63,127] [--gpt2-k 10]
[--vit-inputs 1] [--vit-k 10]`` or ``python bench/analyze_checkpoint.py --entry-points [--inputs 8] [--k 8]
[--image-size 32]``.
The table gives seconds and peak MB of each part (and RA's CPU seconds, which tell a busy machine from a slow
analysis), the ratio of each case's total time to the reference case (ResNet-18 at 64 px, measured in the same run)
and of its RA time to the reference's, the largest Jacobian (D), what was analysed (inputs, token positions, K), and
the numbers themselves: RA2's mean off-diagonal alignment score beside its random baseline, RA1's straightness, RA4's
1/σ₁ slope, which properties are n/a (their reasons are printed under the table), and the last state's rank.

The inputs are Gaussian noise images (random token ids for GPT-2) and the networks untrained (nothing is
downloaded; no ImageNet here): the figures are the cost of the analysis, which does not depend on what the weights
learned, except through the Krylov SVD's iterations (flat spectra, as here, are its worst case).
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

RESNETS = ("resnet18@64", "resnet50@64", "resnet18@224", "resnet50@224")
TRANSFORMERS = ("gpt2", "vit")
CASES = RESNETS + TRANSFORMERS
REFERENCE = CASES[0]
NA_LABELS = {"straightness": "RA1", "spacing_cv": "RA1", "align_offdiag": "RA2", "topk_ratio": "RA3",
             "inv_sigma1_slope": "RA4", "inv_sigma1_r2": "RA4", "nc": "NC", "head": "head"}


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

    start, cpu = time.perf_counter(), time.process_time()
    ra = residual_alignment(view, x[:inputs], y[:inputs], k, nc_x=x[:inputs], nc_y=y[:inputs], num_classes=10,
                            fit_start=0, seed=0)
    ra_s, ra_cpu, ra_peak = time.perf_counter() - start, time.process_time() - cpu, _peak_mb()

    start = time.perf_counter()
    n = rank_inputs
    layers = layer_rank_metrics(layer_features(view, x[:n]), y[:n], layer_features(view, x[n:2 * n]), y[n:2 * n],
                                num_classes=10)
    with torch.no_grad(), eval_mode(view):
        moved = retransformation(view.forward_intermediates(x[:n], intermediates_only=True))
    rank_s, peak = time.perf_counter() - start, _peak_mb()
    ranks = layers["eq6_entropy"]
    return {"case": case, "setup": f"{inputs} images, K = {k}", "blocks": len(ranks) - 1, "d_max": d_max,
            "load_s": load_s, "keys": report.text(), "ra_s": ra_s, "ra_cpu_s": ra_cpu, "ra_peak_mb": ra_peak,
            "rank_s": rank_s, "peak_mb": peak, **_ra_numbers(ra), "rank_last": float(ranks[-1]),
            "rank_first": float(ranks[0]), "probe_last": float(layers["probe_acc"][-1]),
            "backtrack": float(moved["backtrack"])}


def _ra_numbers(ra: dict) -> dict:
    """The RA numbers a row shows, and the reasons of those that are n/a."""
    from lab.analysis.residual_alignment import alignment_reasons

    return {"align": float(ra["align_offdiag"]), "baseline": float(ra["baseline_mean"]),
            "straightness": float(ra["straightness"]), "slope": float(ra["inv_sigma1_slope"]),
            "r2": float(ra["inv_sigma1_r2"]), "topk": float(ra["topk_ratio"]),
            "sigma1_first_last": [float(ra["sigma"][0, 0]), float(ra["sigma"][-1, 0])],
            "reasons": alignment_reasons(ra)}


def _positions(text: str) -> list[int]:
    return [int(p) for p in text.split(",") if p.strip()]


def run_transformer(case: str, args: argparse.Namespace) -> dict:
    """One Transformer case (:data:`TRANSFORMERS`), in this process: built at random init, saved with
    ``save_pretrained``, read back by :func:`lab.nn.hf.load_pretrained`, and analysed by RA (no rank part)."""
    import torch
    import transformers

    from lab.analysis.residual_alignment import residual_alignment
    from lab.nn.hf import HFTransformer, load_pretrained

    torch.manual_seed(0)
    if case == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12,
                                                                     vocab_size=50257, n_positions=1024))
    else:
        model = transformers.ViTForImageClassification(transformers.ViTConfig(
            hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536, image_size=224,
            patch_size=16, num_labels=10))
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(Path(tmp) / case)
        del model
        start = time.perf_counter()
        view = HFTransformer(load_pretrained(Path(tmp) / case))
        load_s = time.perf_counter() - start

    if case == "gpt2":
        positions = _positions(args.gpt2_positions)
        x = torch.randint(0, 50257, (args.gpt2_windows, args.gpt2_tokens))
        y = torch.zeros(len(x), dtype=torch.long)
        k, d_max = args.gpt2_k, 768  # a per-token Jacobian: D × D
        setup = (f"{len(x)} window{'s' if len(x) > 1 else ''} of {args.gpt2_tokens} tokens at positions "
                 f"{','.join(map(str, positions))}, K = {k}")
        kwargs = {"positions": positions, "num_classes": 0}
    else:
        x = torch.randn(args.vit_inputs, 3, 224, 224)
        y = torch.arange(len(x)) % 10
        nc_x = torch.randn(20, 3, 224, 224)  # two per class: neural collapse needs classes, RA does not
        k, d_max = args.vit_k, 197 * 384  # the whole token stream
        setup = f"{len(x)} image{'s' if len(x) > 1 else ''} (whole stream), K = {k}; NC at 20"
        kwargs = {"nc_x": nc_x, "nc_y": torch.arange(20) % 10, "num_classes": 10}
    start, cpu = time.perf_counter(), time.process_time()
    ra = residual_alignment(view, x, y, k, seed=0, **kwargs)
    ra_s, ra_cpu, peak = time.perf_counter() - start, time.process_time() - cpu, _peak_mb()
    return {"case": case, "setup": setup, "blocks": len(ra["sigma"]), "d_max": d_max, "load_s": load_s,
            "ra_s": ra_s, "ra_cpu_s": ra_cpu, "ra_peak_mb": peak, "rank_s": None, "peak_mb": peak, **_ra_numbers(ra)}


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
    parser.add_argument("--inputs", type=int, default=2, help="inputs of the ResNets' RA analysis (default 2)")
    parser.add_argument("--k", type=int, default=10, help="ResNets: singular triplets per block (default 10, the "
                                                          "paper's smallest K)")
    parser.add_argument("--rank-inputs", type=int, default=64, help="training (and test) inputs of the rank analysis "
                                                                     "(default 64)")
    parser.add_argument("--cases", "--only", dest="cases", default=",".join(CASES),
                        help=f"comma list of arch@px, gpt2 and vit (default {','.join(CASES)}); the reference "
                             f"{REFERENCE} is always run")
    parser.add_argument("--gpt2-windows", type=int, default=1, help="gpt2: windows of random token ids (default 1)")
    parser.add_argument("--gpt2-tokens", type=int, default=128, help="gpt2: tokens per window (default 128)")
    parser.add_argument("--gpt2-positions", default="63,127", help="gpt2: comma list of the token positions "
                                                                   "analysed (default 63,127)")
    parser.add_argument("--gpt2-k", type=int, default=10, help="gpt2: singular triplets per step (default 10)")
    parser.add_argument("--vit-inputs", type=int, default=1, help="vit: Gaussian images (default 1)")
    parser.add_argument("--vit-k", type=int, default=10, help="vit: singular triplets per step (default 10; RA3 "
                                                              "needs 20, twice the classes)")
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
        result = (run_transformer(args.case, args) if args.case in TRANSFORMERS
                  else run_case(args.case, args.inputs, args.k, args.rank_inputs))
        print(json.dumps(result))
        return
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in TRANSFORMERS and "@" not in c]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}: arch@px (e.g. {RESNETS[0]}), or one of "
                     f"{', '.join(TRANSFORMERS)}")
    if REFERENCE not in cases:
        cases.insert(0, REFERENCE)
    print(f"untrained networks, Gaussian images (random token ids); ResNets: RA at {args.inputs} inputs, K = {args.k},"
          f" rank at {args.rank_inputs} inputs; {os.cpu_count()} CPUs", flush=True)
    forwarded = ["--inputs", str(args.inputs), "--k", str(args.k), "--rank-inputs", str(args.rank_inputs),
                 "--gpt2-windows", str(args.gpt2_windows), "--gpt2-tokens", str(args.gpt2_tokens),
                 "--gpt2-positions", args.gpt2_positions, "--gpt2-k", str(args.gpt2_k), "--vit-inputs",
                 str(args.vit_inputs), "--vit-k", str(args.vit_k)]
    results = {}
    for case in cases:
        child = subprocess.run([sys.executable, __file__, "--case", case, *forwarded],
                               capture_output=True, text=True, cwd=ROOT)
        if child.returncode:
            print(f"{case}: failed\n{child.stderr[-2000:]}", flush=True)
            continue
        results[case] = json.loads(child.stdout.strip().splitlines()[-1])
        print(f"{case}: done in {results[case]['ra_s'] + (results[case]['rank_s'] or 0):.1f} s", flush=True)
    print(results_table(results))


def _number(value: float, digits: int = 3) -> str:
    return "n/a" if value != value else f"{value:.{digits}f}"  # NaN


def results_table(results: dict[str, dict]) -> str:
    """The table of the cases' results (``run_case`` / ``run_transformer`` dicts), ratios against
    :data:`REFERENCE`, and under it the reasons of every n/a RA number."""
    ref = results.get(REFERENCE)
    rows, notes = [], []
    for case, r in results.items():
        total = r["ra_s"] + (r["rank_s"] or 0)
        ratio = f"{total / (ref['ra_s'] + ref['rank_s']):.1f}" if ref else "n/a"
        ra_ratio = f"{r['ra_s'] / ref['ra_s']:.1f}" if ref else "n/a"
        na = sorted({NA_LABELS.get(key, key) for key in r["reasons"]})
        rank = "–" if r["rank_s"] is None else f"{r['rank_first']:.2f} / {r['rank_last']:.2f}"
        rows.append([case, r["setup"], r["blocks"], f"{r['d_max']:,}", f"{r['ra_s']:.1f}", f"{r['ra_cpu_s']:.1f}",
                     ra_ratio, "–" if r["rank_s"] is None else f"{r['rank_s']:.1f}", ratio, f"{r['peak_mb']:,.0f}",
                     f"{_number(r['align'])} / {_number(r['baseline'])}", _number(r["straightness"]),
                     _number(r["slope"]), ", ".join(na) or "–", rank,
                     "–" if r["rank_s"] is None else f"{r['backtrack']:.3f}"])
        notes += [f"  {case}, {key}: {why}" for key, why in r["reasons"].items() if key != "inv_sigma1_r2"]
    text = table(["case", "analysed", "blocks", "max D", "RA s", "RA CPU s", "RA / ref", "rank s", "total / ref",
                  "peak MB", "RA2 / baseline", "RA1 straight", "RA4 slope", "n/a", "rank first / last", "backtrack"],
                 rows)
    return text + ("\nn/a, why:\n" + "\n".join(notes) if notes else "")


if __name__ == "__main__":
    main()
