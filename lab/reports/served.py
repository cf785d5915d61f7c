"""A network named on a page, analysed from a weights file inside the server's folders (in a page's bounded child).

What the "Analyse a checkpoint" card sends: the network's name, the weights file's path as typed, the folders it
may lie in, and a short list of data settings. The file is opened once, inside those folders and without following
a link (:func:`~lab.data.roots.open_data_file`), and read from that descriptor: what is checked is what is
analysed, and its SHA-256 is of those bytes. The imported run keeps no copy: its analyses read the file again from
its path and use it only if its size and SHA-256 are still those recorded (:func:`~lab.nn.weights.read_recorded`).
Nothing else typed reaches the config: the settings are the data's (image size, samples per class) and the
analysis's (inputs, K), never a model's construction keys or a path. The analysis keeps the torch threads of the
process it runs in (a bounded child's: :mod:`lab.jobs.bounded`).

A Hugging Face folder (``hf:DIR``) is resolved inside those folders and must hold no link (its config and tokenizer
are read by name); its weights file is opened as any other, and a language model reads a text file
(``data="text"``, ``data_root`` the file) checked the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from lab.data.roots import NO_LINKS, open_data_file, resolve_data_path
from lab.nn.hf import HF_PREFIX, saved_model
from lab.reports.lenses import Analysis, analyze

__all__ = ["MAX_IMAGE_SIZE", "MAX_PER_CLASS", "analyze_served"]

MAX_IMAGE_SIZE = 224
"""The largest image side a page's analysis may ask for (ImageNet's): the data set is resized to it in memory."""
MAX_PER_CLASS = 10_000
"""The most images per class a page's analysis may read."""


def analyze_served(network: str, weights: str, roots: Sequence[Path], *, data: str = "digits",
                   data_root: Path | None = None, image_size: int = 0, max_per_class: int = 0, inputs: int = 16,
                   k: int = 10, blocks: str | None = None, analyses: Sequence[str] = ("alignment",),
                   runs_dir: Path | None = None, progress: Callable[[int, int], None] | None = None) -> Analysis:
    """:func:`~lab.reports.lenses.analyze` of ``network`` with the weights file ``weights`` typed on a page.

    Args:
        network: ``timm:<arch>``, ``torchvision:<arch>``, a registered lab model, or ``hf:DIR`` (a folder inside
            ``roots``).
        weights: the file's path as typed: relative to one of ``roots``, or absolute inside one ("" for an
            ``hf:DIR``: its own).
        roots: the folders it may lie in (the server's run folders and data folders).
        data: the data set's name; ``data_root`` its folder (resolved already inside the server's data folders).
        image_size: the side images are resized to (0: the data set's own), at most :data:`MAX_IMAGE_SIZE`.
        max_per_class: at most this many images per class (0: all), at most :data:`MAX_PER_CLASS`.
        inputs, k, blocks, analyses, runs_dir, progress: as :func:`~lab.reports.lenses.analyze` takes them.

    Raises:
        ValueError: a setting out of range; and whatever :func:`~lab.data.roots.open_data_file` and
            :func:`~lab.reports.lenses.analyze` raise (the file outside the folders, a link, pickled objects …).
    """
    if not 0 <= image_size <= MAX_IMAGE_SIZE:
        raise ValueError(f"image size {image_size} is outside 0 (the data's own) to {MAX_IMAGE_SIZE}")
    if not 0 <= max_per_class <= MAX_PER_CLASS:
        raise ValueError(f"samples per class {max_per_class} is outside 0 (all) to {MAX_PER_CLASS}")
    settings = [f"data.image_size={image_size}"] * bool(image_size) + \
        [f"data.max_per_class={max_per_class}"] * bool(max_per_class)
    if network.startswith(HF_PREFIX):
        folder = resolve_data_path(network.removeprefix(HF_PREFIX), roots)
        links = sorted(p.name for p in folder.iterdir() if p.is_symlink())
        if links:
            raise PermissionError(f"{folder.name} holds links ({', '.join(links[:5])}): {NO_LINKS}")
        network = f"{HF_PREFIX}{folder}"
        weights = weights or str(saved_model(folder).weights)
    with open_data_file(weights, roots) as file:
        return analyze(network, weights=file, data=f"{data}={data_root}" if data_root else data, settings=settings,
                       analyses=analyses, inputs=inputs, k=k, runs_dir=runs_dir, progress=progress, blocks=blocks,
                       threads=torch.get_num_threads())
