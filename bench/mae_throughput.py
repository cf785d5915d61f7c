"""MAE pretraining throughput: images per second of a plain PyTorch training loop against the loader engine's step,
on the same model, batch and device, measured in one run (:mod:`lab.reproduce.throughput`, which an installed lab
runs as ``lab throughput mae``).

On a GPU (the check to run when one is lent): ViT-B/16 at 224 px, batch 256, where the paper's recipe runs::

    python bench/mae_throughput.py                     # CUDA: mae_vit_base_patch16, batch 256, bf16 row
    python bench/mae_throughput.py --data /data/imagenet --workers 10

On a CPU it defaults to the CIFAR-scale ``mae_vit_tiny_patch4_32`` at batch 64. Targets: the engine's float32 step
within 10 % of plain (ratio ≥ 0.9); on CUDA, bf16 at least 1.5 × plain float32.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from lab.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["throughput", "mae", *sys.argv[1:]]))
