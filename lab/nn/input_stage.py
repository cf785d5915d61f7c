"""What a network trained elsewhere takes as input, made from the lab's image tensors: the first module of the lab's
view of an imported network.

The lab gives every analysis the same tensors: images ``[n, C, H, W]`` at the data set's size, standardised with
the training images' mean and std per channel (:func:`lab.train.build.build_data`). A network trained by timm or
torchvision expected something else: RGB images at its input size, normalised with its library's mean and std — or
raw pixels in [0, 1], or the data's own statistics, as whoever trained it chose. :class:`InputStage` turns the
former into the latter, as those libraries' evaluation transforms do: back to pixels in [0, 1] (undoing the lab's
standardisation), grey repeated to the network's channels, resized to its side (antialiased, clamped to [0, 1]),
normalised with the chosen mean and std. :func:`plan_inputs` decides it from the network's shape (read off its
weights, :mod:`lab.nn.network_shape`) and the data's, and says in one sentence what it does. The stage holds no
parameter and saves nothing in the state dict, so the network's keys stay its library's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["INTERPOLATIONS", "NORMALIZE", "InputStage", "PlannedInputs", "input_stage", "plan_inputs"]

NORMALIZE = ("auto", "model", "data", "none")
"""How an imported network's inputs are normalised: ``model``, with its library's mean and std (timm's
``pretrained_cfg``, torchvision's ImageNet transforms); ``data``, with the data's own training statistics (as the
lab trains); ``none``, raw pixels in [0, 1]; ``auto``, ``model`` for a timm or torchvision network that takes its
library's three channels and ``data`` otherwise (the lab's own models, a network built for other channels)."""
INTERPOLATIONS = ("bilinear", "bicubic")
"""How the stage resizes (timm's ``pretrained_cfg`` names bicubic for most networks, torchvision bilinear)."""


class InputStage(nn.Module):
    """The lab's image tensors → the inputs a network takes.

    Args:
        channels: the network's input channels; a one-channel image is repeated to them (as a grey image converted
            to RGB), any other count must equal them.
        size: the network's input side (0: the data's own).
        interpolation: ``bilinear`` or ``bicubic`` (antialiased when shrinking).
        pixels: ``(mean, std)`` per channel of the lab's standardisation, undone first so the stage works on pixels
            in [0, 1] (None: the lab's standardised values are kept, only repeated and resized).
        mean: subtracted per channel of the network's input after resizing (None: nothing).
        std: divided by after ``mean``.

    Raises:
        ValueError: a setting out of range or of the wrong length (the message names it).
    """

    def __init__(self, channels: int, size: int = 0, interpolation: str = "bilinear",
                 pixels: Sequence[Sequence[float]] | None = None, mean: Sequence[float] | None = None,
                 std: Sequence[float] | None = None) -> None:
        super().__init__()
        if channels < 1 or size < 0 or interpolation not in INTERPOLATIONS:
            raise ValueError(f"an input stage takes channels >= 1, size >= 0 and interpolation in {INTERPOLATIONS}; "
                             f"got {channels}, {size}, {interpolation!r}")
        if (mean is None) != (std is None) or (mean is not None and not len(mean) == len(std) == channels):
            raise ValueError(f"an input stage's mean and std come together, one value per channel ({channels}); got "
                             f"{mean!r} and {std!r}")
        if pixels is not None and (len(pixels) != 2 or len(pixels[0]) != len(pixels[1])):
            raise ValueError(f"an input stage's pixels are (mean, std) of the lab's standardisation; got {pixels!r}")
        self.channels, self.size, self.interpolation = int(channels), int(size), interpolation
        pixel_mean, pixel_std = pixels if pixels is not None else (None, None)
        for name, values in (("pixel_mean", pixel_mean), ("pixel_std", pixel_std), ("mean", mean), ("std", std)):
            tensor = None if values is None else torch.tensor([float(v) for v in values]).reshape(1, -1, 1, 1)
            if name.endswith("std") and tensor is not None and bool((tensor <= 0).any()):
                raise ValueError(f"an input stage's {name.replace('_', ' ')} must be positive; got {values!r}")
            self.register_buffer(name, tensor, persistent=False)  # moves with the model, stays out of its keys

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, C, H, W]`` (the lab's tensors) → ``[B, channels, size, size]`` (the network's inputs)."""
        if x.ndim != 4:
            raise ValueError(f"the input stage takes images [B, C, H, W]; got a tensor of shape {tuple(x.shape)}")
        pixels = self.pixel_mean is not None
        if pixels:
            if x.shape[1] != self.pixel_mean.shape[1]:
                raise ValueError(f"the input stage was planned for {self.pixel_mean.shape[1]}-channel images; got "
                                 f"{x.shape[1]} channels")
            x = x * self.pixel_std + self.pixel_mean
        if x.shape[1] != self.channels:
            if x.shape[1] != 1:
                raise ValueError(f"the network takes {self.channels} channels; images of {x.shape[1]} cannot be "
                                 "made into them (only a grey image is repeated)")
            x = x.expand(-1, self.channels, -1, -1)
        if self.size and tuple(x.shape[-2:]) != (self.size, self.size):
            x = F.interpolate(x, size=(self.size, self.size), mode=self.interpolation, align_corners=False,
                              antialias=True)
            if pixels:  # bicubic overshoots: pixels stay pixels, as torchvision's and PIL's resizing keep them
                x = x.clamp(0.0, 1.0)
        if self.mean is not None:
            x = (x - self.mean) / self.std
        return x

    def extra_repr(self) -> str:
        return (f"channels={self.channels}, size={self.size}, interpolation={self.interpolation}, "
                f"pixels={self.pixel_mean is not None}, normalized={self.mean is not None}")


def input_stage(record: dict[str, Any] | None) -> InputStage | None:
    """The stage a config's ``model.inputs`` describes (:attr:`PlannedInputs.stage`); None for none.

    Raises:
        ValueError: an unknown key or a bad value (the message names the keys a stage takes).
    """
    if record is None:
        return None
    keys = ("channels", "size", "interpolation", "pixels", "mean", "std")
    if not isinstance(record, dict) or set(record) - set(keys) or "channels" not in record:
        raise ValueError(f"model.inputs describes an input stage with the keys {', '.join(keys)} (channels "
                         f"required); got {record!r}")
    return InputStage(**record)


@dataclass(frozen=True)
class PlannedInputs:
    """How the lab's tensors become a network's inputs.

    Attributes:
        stage: the :class:`InputStage`'s settings (``model.inputs``), or None when the network takes the lab's
            tensors as they are.
        normalize: the normalisation chosen: ``model``, ``data`` or ``none`` (``auto`` resolved).
        text: one sentence for people: ``digits 8 px → 3 × 224 × 224, grayscale repeated, normalised with the
            model's mean/std (timm pretrained_cfg)``.
    """

    stage: dict[str, Any] | None
    normalize: str
    text: str


def plan_inputs(*, data: str, data_channels: int, data_size: int, data_scale: tuple[Sequence[float], Sequence[float]],
                channels: int, size: int, library: tuple[Sequence[float], Sequence[float], str, str] | None,
                normalize: str = "auto", stage: bool = True) -> PlannedInputs:
    """How the data's tensors are made into the network's inputs.

    Args:
        data: the data set's name, for the sentence.
        data_channels: the channels of the lab's tensors (1 for grey sets).
        data_size: their side in pixels.
        data_scale: ``(mean, std)`` per channel they were standardised with.
        channels: the network's input channels (read off its stem's weight).
        size: the side it takes (its library's, a ViT's fixed size, the user's; 0 or ``data_size``: as the data).
        library: ``(mean, std, interpolation, source)`` of the network's library (None: the lab's own model), the
            mean and std over its library's three channels.
        normalize: one of :data:`NORMALIZE`.
        stage: whether the network can have an input stage (False: a network seen through ``--blocks``, or a lab
            model, which take the lab's tensors as they are).

    Raises:
        ValueError: a normalisation or adaptation the network cannot have, or channels that do not fit (each
            message says what to choose instead).
    """
    if normalize not in NORMALIZE:
        raise ValueError(f"data.normalize for an imported network is one of {', '.join(NORMALIZE)}; got {normalize!r}")
    if normalize == "auto":
        normalize = "model" if library is not None and stage and channels == len(library[0]) else "data"
    if normalize == "model" and library is None:
        raise ValueError("data.normalize=model uses the mean and std of a timm or torchvision network; the lab's own "
                         "models take the data's statistics (data.normalize=data)")
    size = size or data_size
    if data_channels != channels and data_channels != 1:
        raise ValueError(f"the network takes {channels} input channels and {data} has {data_channels}: analyse it on "
                         f"data of {channels} channels (or of 1, repeated)")
    needs = [what for what, differs in (("channels", data_channels != channels), ("size", size != data_size),
                                        ("normalisation", normalize != "data")) if differs]
    if needs and not stage:
        raise ValueError(f"this network takes the lab's tensors as they are ({data}: {data_channels} × {data_size} × "
                         f"{data_size}, standardised with the data's statistics), but its inputs differ in "
                         f"{' and '.join(needs)} ({channels} × {size} × {size}, data.normalize={normalize}): give "
                         "it data of its shape (data.image_size, a set of its channels) and data.normalize=data")
    shape = f"{data} {data_size} px → {channels} × {size} × {size}"
    parts = [shape] + (["grayscale repeated"] if data_channels != channels else [])
    if normalize == "model":
        mean, std, interpolation, source = library
        if channels != len(mean):  # a network built for other channels: its library's statistics averaged
            mean, std = [sum(mean) / len(mean)] * channels, [sum(std) / len(std)] * channels
            source += f", averaged over its {len(library[0])} channels"
        parts.append(f"normalised with the model's mean/std ({source})")
    else:
        interpolation = library[2] if library is not None else "bilinear"
        mean = std = None
        parts.append("standardised with the data's own statistics" if normalize == "data" else "raw pixels in [0, 1]")
    if not needs:
        return PlannedInputs(None, normalize, ", ".join(parts))
    pixels = None if normalize == "data" else [list(map(float, data_scale[0])), list(map(float, data_scale[1]))]
    record = {"channels": channels, "size": size, "interpolation": interpolation if interpolation in INTERPOLATIONS
              else "bilinear", "pixels": pixels, "mean": None if mean is None else list(map(float, mean)),
              "std": None if std is None else list(map(float, std))}
    return PlannedInputs(record, normalize, ", ".join(parts))
