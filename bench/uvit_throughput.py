"""U-ViT diffusion training throughput: images per second of a plain PyTorch training loop (with the weights' moving
average, as the U-ViT reference's ``train.py`` steps) against the loader engine's step, on the same model, batch and
device, measured in one run (:mod:`lab.reproduce.throughput`, which an installed lab runs as ``lab throughput
uvit``).

On a GPU (the check to run when one is lent): U-ViT-S/2 on 32 × 32 pixels, batch 128, as Table 4's CIFAR row::

    python bench/uvit_throughput.py                    # CUDA: uvit_small, batch 128, bf16 row

On a CPU it defaults to ``uvit_tiny`` (8 × 8 digits) at batch 128. Target: the engine's float32 step within 10 % of
plain (ratio ≥ 0.9); on CUDA, bf16 at least 1.5 × plain float32.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from lab.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["throughput", "uvit", *sys.argv[1:]]))
