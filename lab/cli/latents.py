"""``latents IMAGES --vae DIR --out DIR``: an image folder encoded with a local VAE into a latent folder
(``data.name=latent_folder``); under ``torchrun`` each process encodes its share."""

from __future__ import annotations

import argparse
import os
import sys

import torch

from lab.data.latents import encode_image_folder
from lab.runfolder import layout
from lab.train.core import resolve_device
from lab.train.distributed import launched_by_torchrun


def run(args: argparse.Namespace) -> int:
    """``latents``: 0 when the latent folder is complete, 2 for bad input (a missing VAE or image folder)."""
    if args.image_size < 8 or args.batch_size < 1 or not 0 < args.train_fraction < 1:
        print("error: --image-size must be >= 8, --batch-size >= 1 and --train-fraction in (0, 1)", file=sys.stderr)
        return 2
    device = resolve_device(args.device)
    if device.type == "cuda" and launched_by_torchrun():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    try:
        out = encode_image_folder(args.images, args.vae, args.out, image_size=args.image_size, classes=args.classes,
                                  max_per_class=args.max_per_class, train_fraction=args.train_fraction,
                                  seed=args.seed, batch_size=args.batch_size, device=device,
                                  progress=not args.no_progress)
    except (FileNotFoundError, ValueError) as err:  # VAENotFoundError, DatasetNotFoundError
        print(f"error: {err}", file=sys.stderr)
        return 2
    if (out / layout.LATENTS_INDEX).is_file():
        print(f"latent folder: {out} (train with data.name=latent_folder data.root={out})", file=sys.stderr)
    return 0
