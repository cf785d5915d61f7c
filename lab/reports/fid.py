"""Fréchet distances of a diffusion run's samples from reference images: FID, or digits-FD at toy scale.

*Residual Connections Harm Generative Representation Learning* (Table 4) reports FID: the Fréchet distance between
Gaussians fitted to the Inception-v3 pool features (2048) of generated and of real images, computed here by
torchmetrics' ``FrechetInceptionDistance`` on torch-fidelity's Inception (the TensorFlow FID network). Its weights
are never downloaded: ``inception_weights`` names a local copy of torch-fidelity's
``weights-inception-2015-12-05-6726825d.pth`` (:data:`INCEPTION_WEIGHTS`), loaded with ``weights_only=True``.

For models of scikit-learn's digits the same distance is taken in the penultimate features of a digits classifier
the lab trains (:mod:`lab.analysis.digits_features`) and named **digits-FD**, never FID: Inception has not seen an
8 × 8 digit, and the two numbers share no scale.

Samples go back to pixels in [0, 1] with the run's own standardisation (:func:`lab.train.build.pixel_scale`) and
are clamped there, as the U-ViT reference clamps its samples before its FID. The reference is the run's training
images (``digits``, as FID on CIFAR compares with the training set) or a folder of image files. Every measurement is
appended to ``<run>/analysis/fid.json``; earlier ones stay.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm import tqdm

from lab.analysis.frechet import frechet_distance, to_pixels
from lab.config import ExperimentConfig, config_of_run
from lab.data.formats import IMAGE_SUFFIXES, read_images
from lab.runfolder import layout
from lab.runfolder.entries import LIMITS, read_json
from lab.runfolder.layout import Checkpoint
from lab.runfolder.writes import atomic_write_json
from lab.runs.store import Run
from lab.train.build import pixel_scale, raw_images
from lab.train.checkpoint import load_problem
from lab.train.core import resolve_device

FEATURES = ("inception", "digits-classifier")
METRICS = {"inception": "FID", "digits-classifier": "digits-FD"}
INCEPTION_WEIGHTS = ("torch-fidelity's weights-inception-2015-12-05-6726825d.pth (the TensorFlow FID Inception in "
                     "PyTorch), from https://github.com/toshas/torch-fidelity/releases/download/v0.2.0/"
                     "weights-inception-2015-12-05-6726825d.pth, copied onto this machine")


def folder_pixels(folder: str | Path, channels: int, size: int, limit: int | None = None) -> Tensor:
    """The image files under ``folder`` (recursively, sorted by path; at most ``limit``) as pixels
    ``[n, channels, size, size]`` in [0, 1] (grey or RGB, resized where their side differs;
    :func:`lab.data.formats.read_images`).

    Raises:
        FileNotFoundError: no such folder, or no image files in it.
        FormatError: a file that is not a readable image.
    """
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"reference folder {str(root)!r} does not exist")
    files = sorted(p for p in root.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())[:limit]
    if not files:
        raise FileNotFoundError(f"reference folder {str(root)!r} holds no image files ({', '.join(IMAGE_SUFFIXES)})")
    pixels = read_images(files, size=(size, size), grayscale=channels == 1)  # [n, H, W, C] uint8
    return torch.from_numpy(pixels).permute(0, 3, 1, 2).float().div_(255.0)


def reference_pixels(cfg: ExperimentConfig, reference: str, channels: int, size: int,
                     limit: int | None = None) -> Tensor:
    """The reference images of a run of ``cfg``: ``digits``, the training split of a digits run (its classes, its
    side; :func:`fid_report` checks the run is one before it samples); otherwise a folder of image files
    (:func:`folder_pixels`)."""
    if reference == "digits":
        return raw_images(cfg).x_train[:limit]
    return folder_pixels(reference, channels, size, limit)


class InceptionPixels(nn.Module):
    """The FID Inception of torchmetrics (2048 pool features) on pixels ``[n, C, H, W]`` in [0, 1]: grey images
    are given as three equal channels, and the pixels become bytes as torchmetrics' ``normalize=True`` makes them."""

    num_features = 2048  # read by torchmetrics' Fréchet distance

    def __init__(self, inception: nn.Module) -> None:
        super().__init__()
        self.inception = inception

    def forward(self, pixels: Tensor) -> Tensor:
        if pixels.shape[1] == 1:
            pixels = pixels.expand(-1, 3, -1, -1)
        return self.inception((pixels * 255).byte())


def inception_features(weights: str | Path | None) -> InceptionPixels:
    """torchmetrics' FID Inception with the weights of the file ``weights``.

    The file is read with ``weights_only=True`` (the library itself would unpickle it unrestricted), and what it held
    is handed to the library through a private copy.

    Raises:
        ValueError: no file named (the message says where the weights come from), or it is not a state dict of the
            FID Inception.
        FileNotFoundError: the file does not exist.
    """
    if weights is None:
        raise ValueError(f"FID needs the Inception weights, and nothing is downloaded: pass --inception-weights PATH, "
                         f"{INCEPTION_WEIGHTS}; a model of the digits is measured without them by --features "
                         "digits-classifier (digits-FD)")
    path = Path(weights).expanduser()
    if path.is_dir():
        raise ValueError(f"Inception weights {str(path)!r} name a folder; give the weights file itself "
                         f"({INCEPTION_WEIGHTS})")
    if not path.is_file():
        raise FileNotFoundError(f"Inception weights {str(path)!r} do not exist ({INCEPTION_WEIGHTS})")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # pickle errors, truncated zip archives, foreign objects: all say the same
        raise ValueError(f"Inception weights {str(path)!r} are not a readable state dict ({load_problem(err)})") \
            from None
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise ValueError(f"Inception weights {str(path)!r} hold no state dict of tensors")
    from torchmetrics.image.fid import NoTrainInceptionV3

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "inception.pth"
        torch.save(state, copy)
        try:
            inception = NoTrainInceptionV3(name="inception-v3-compat", features_list=["2048"],
                                           feature_extractor_weights_path=str(copy))
        except RuntimeError as err:  # load_state_dict: missing or unexpected keys, other shapes
            raise ValueError(f"Inception weights {str(path)!r} do not fit the FID Inception: {err}") from None
    return InceptionPixels(inception)


def read_measurements(run: Run) -> list[dict[str, Any]]:
    """The measurements of ``<run>/analysis/fid.json``, oldest first ([] when there is none).

    Raises:
        ValueError: the file exists but cannot be read (it is left as it is).
    """
    path = run.analysis_path(layout.FID)
    if not os.path.lexists(path):
        return []
    try:
        data = read_json(path, LIMITS["analysis"])
        measurements = data["measurements"]
        if not isinstance(measurements, list):
            raise TypeError("measurements is not a list")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path} exists but cannot be read ({err}); move it away to start a new one") from None
    return measurements


def fid_report(run: Run, *, reference: str = "digits", features: str = "digits-classifier", num: int = 1000,
               steps: int | None = None, sampler: str | None = None, guidance: float = 0.0,
               checkpoint: str = Checkpoint.LAST, ema: bool | None = None, inception_weights: str | Path | None = None,
               reference_limit: int | None = 50_000, seed: int = 0, batch_size: int = 256, device: str = "auto",
               progress: bool = True) -> dict[str, Any]:
    """Draw ``num`` samples of a diffusion run and measure their Fréchet distance from reference images.

    Args:
        run: a run of ``train.task=diffusion``.
        reference: ``digits`` (the run's training digits) or a folder of image files.
        features: ``inception`` (FID; needs ``inception_weights``) or ``digits-classifier`` (digits-FD; grey
            images).
        num: samples drawn (the reference's FID takes 50,000; fewer give a larger, noisier number).
        steps: sampler steps; None: the run's ``train.sample_steps``.
        sampler: ``ode`` or ``sde``; None: the run's ``train.sampler``.
        guidance: classifier-free guidance scale (class-conditional runs).
        checkpoint: ``last`` or ``best``.
        ema: sample with the weights' moving average; None: when the run kept one.
        inception_weights: the Inception's weights file (:data:`INCEPTION_WEIGHTS`).
        reference_limit: at most this many reference images.
        seed: the samples' noise.
        batch_size: images drawn and measured at once.
        device: ``auto`` (CUDA when present), ``cpu`` or ``cuda[:i]``.
        progress: show a progress bar.

    Returns:
        The measurement appended to ``analysis/fid.json``: ``metric`` ("FID" or "digits-FD"), ``value``,
        ``features``, ``reference``, ``reference_images``, ``num``, ``step``, ``sampler``, ``steps``,
        ``guidance``, ``weights``, ``seed``, ``time``, and for digits-FD the judge's ``classifier_accuracy``.

    Raises:
        ValueError: an unknown feature space, a setting out of range, a run that is not a diffusion run, grey-only
            features for colour images, missing Inception weights, an unreadable ``fid.json``.
        FileNotFoundError: a reference folder or weights file that does not exist.
        CheckpointError: the checkpoint is missing or corrupt.
    """
    from lab.reports.samples import check_request, sample_batches

    if features not in FEATURES:
        raise ValueError(f"unknown features {features!r}; valid: {', '.join(FEATURES)}")
    if num < 2 or (reference_limit is not None and reference_limit < 2):
        raise ValueError(f"a Fréchet distance needs at least 2 images on each side; got num={num}, "
                         f"reference_limit={reference_limit}")
    check_request(num, steps or 1, guidance, batch_size)
    earlier = read_measurements(run)  # an unreadable file stops the command before any work, and stays
    try:
        dev = resolve_device(device)
    except RuntimeError as err:
        raise ValueError(f"device {device!r}: {err}") from None
    cfg = config_of_run(run)
    if cfg.train.task != "diffusion":
        raise ValueError(f"{run.path.name} trained train.task={cfg.train.task}: only diffusion runs have samples to "
                         "measure")
    if reference == "digits" and cfg.data.name != "digits":
        raise ValueError(f"--reference digits compares with the digits; this run trained on {cfg.data.name}: give a "
                         "folder of its reference images")
    if reference != "digits" and not Path(reference).expanduser().is_dir():
        raise FileNotFoundError(f"reference folder {reference!r} does not exist")
    steps = steps or cfg.train.sample_steps
    extra: dict[str, Any] = {}
    extractor = inception_features(inception_weights) if features == "inception" else None  # before the sampling
    drawn = sample_batches(run, num=num, steps=steps, sampler=sampler, guidance=guidance, checkpoint=checkpoint,
                           ema=ema, seed=seed, batch_size=batch_size, device=device, progress=progress)
    first = next(drawn.batches)  # the samples' shape: the extractor and the reference follow it
    channels, size = first.shape[1], first.shape[-1]
    if features == "digits-classifier":
        if channels != 1:
            raise ValueError(f"digits-FD reads grey images; this run draws {channels} channels: use --features "
                             "inception")
        from lab.analysis.digits_features import digits_classifier

        extractor = digits_classifier(size)
        extra["classifier_accuracy"] = extractor.test_accuracy
    real = reference_pixels(cfg, reference, channels, size, reference_limit)
    scale = pixel_scale(cfg)
    with tqdm(total=len(real) + num, desc=f"{METRICS[features]} features", unit="img",
              disable=not progress, dynamic_ncols=True) as bar:
        def tracked(batches: Iterator[Tensor]) -> Iterator[Tensor]:
            for batch in batches:
                yield batch
                bar.update(len(batch))

        fake = (to_pixels(b, *scale) for b in itertools.chain([first], drawn.batches))  # drawn as they are measured
        value = frechet_distance(extractor, tracked(real.split(batch_size)), tracked(fake), device=dev)
    measurement = {"metric": METRICS[features], "value": value, "features": features,
                   "reference": reference if reference == "digits" else str(Path(reference).expanduser().resolve()),
                   "reference_images": len(real), "num": num, "step": drawn.step, "sampler": drawn.sampler,
                   "steps": steps, "guidance": guidance, "weights": drawn.weights, "seed": seed,
                   "checkpoint": checkpoint, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **extra}
    atomic_write_json(run.analysis_path(layout.FID), {"measurements": [*earlier, measurement]})
    return measurement


def fid_select_best(run: Run, *, num: int = 50_000, select_num: int = 10_000, **kwargs: Any) -> dict[str, Any]:
    """The reference's selection: every checkpoint the run kept (``train.save_every``; ``checkpoints/step-*.pt``)
    scored with ``select_num`` samples, then the best of them (the lowest distance) scored with ``num``; every
    measurement is appended to ``fid.json``.

    Args:
        run: a diffusion run that kept checkpoints.
        num: samples of the final measurement (the reference's FID-50k).
        select_num: samples per checkpoint while selecting (its FID-10k).
        kwargs: :func:`fid_report`'s other settings.

    Returns:
        The final measurement, with ``selected_from``: ``[checkpoint, value]`` of every checkpoint scored.

    Raises:
        ValueError: the run kept no checkpoints (``train.save_every`` was 0), or :func:`fid_report`'s errors.
    """
    names = run.saved_checkpoints()
    if not names:
        raise ValueError(f"{run.path.name} kept no checkpoints to select from: train with train.save_every=N (the "
                         "U-ViT reference keeps one every 50,000 steps), or measure one with --checkpoint")
    scored = [(name, fid_report(run, num=select_num, checkpoint=name, **kwargs)["value"]) for name in names]
    best = min(scored, key=lambda item: item[1])[0]
    final = fid_report(run, num=num, checkpoint=best, **kwargs)
    final["selected_from"] = [[name, value] for name, value in scored]
    measurements = read_measurements(run)  # the last one is the final measurement: note what it was chosen from
    measurements[-1] = final
    atomic_write_json(run.analysis_path(layout.FID), {"measurements": measurements})
    return final


def format_fid(measurement: dict[str, Any]) -> str:
    """One line for the command line: ``digits-FD 12.34 at step 1800 (1000 samples, sde 100 steps, ema weights;
    reference: digits, 1617 images)``."""
    guided = f", guidance {measurement['guidance']:g}" if measurement["guidance"] else ""
    judge = (f"; the digits classifier reads held-out digits at {100 * measurement['classifier_accuracy']:.1f}%"
             if "classifier_accuracy" in measurement else "")
    return (f"{measurement['metric']} {measurement['value']:.4g} at step {measurement['step']} ({measurement['num']} "
            f"samples, {measurement['sampler']} {measurement['steps']} steps{guided}, {measurement['weights']} "
            f"weights; reference: {measurement['reference']}, {measurement['reference_images']} images{judge})")
