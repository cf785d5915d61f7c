"""A library network's shape and inputs, as its weights file and its library say — so a file saved by
``timm.create_model('resnet18', num_classes=10)`` is rebuilt as that network and loads strictly.

From the weights: the input channels (the stem's first convolution, ``[out, in, k, k]``), the classes of the head
(its weight, ``[classes, features]``), and for a ViT its patch size (the patch embedding's kernel) and image size
(its position embedding holds one entry per patch, after the class and register tokens). Which tensors those are
comes from the library: timm's ``pretrained_cfg`` names the first convolution and the classifier of every
architecture; torchvision's ResNets name them ``conv1`` and ``fc`` (any other torchvision network: its first 4-D
and last 2-D weights). From the library: what the network's inputs were — timm's ``pretrained_cfg`` through
``timm.data.resolve_data_config`` (input size, mean, std, interpolation), torchvision's ImageNet transforms
(``get_model_weights(arch).DEFAULT.transforms()``: crop size, mean, std; read from torchvision itself, nothing is
downloaded). A key the file lacks leaves that part unset: the strict key check then names what is missing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

__all__ = ["IMAGENET", "LibraryInputs", "NetworkShape", "hf_shape", "library_network", "read_shape"]

IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
"""ImageNet's mean and std per RGB channel: torchvision's normalisation, and timm's default."""


@dataclass(frozen=True)
class LibraryInputs:
    """What a library network was trained on: its input side, mean and std per channel (RGB), how its images are
    resized, and where that was read (``timm pretrained_cfg``)."""

    size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    interpolation: str
    source: str


@dataclass(frozen=True)
class NetworkShape:
    """A network's shape as its weights give it (None: the file does not say).

    Attributes:
        in_chans: input channels of the stem.
        head_classes: outputs of the classifier head.
        img_size: a ViT's image side, fixed by its position embedding.
        patch_size: a ViT's patch side.
        library: its library's inputs (None for the lab's own models).
    """

    in_chans: int | None = None
    head_classes: int | None = None
    img_size: int | None = None
    patch_size: int | None = None
    library: LibraryInputs | None = None

    def overrides(self, params: Mapping[str, object]) -> dict[str, int]:
        """The model settings (``model.in_chans`` …) of what the file says, for the builder parameters ``params``."""
        known = {"in_chans": self.in_chans, "num_classes": self.head_classes, "img_size": self.img_size,
                 "patch_size": self.patch_size}
        return {f"model.{k}": v for k, v in known.items() if v is not None and k in params}


def library_network(network: Mapping[str, str]) -> tuple[str, str] | None:
    """``(library, arch)`` of the model settings :func:`~lab.nn.networks.network_overrides` gives, or None for one
    of the lab's own models."""
    name = network.get("model.name")
    if name in ("timm_resnet", "timm_vit"):
        return "timm", network["model.arch"]
    if name == "torchvision_resnet":
        return "torchvision", network["model.arch"]
    if name == "named_blocks":
        library, _, arch = network["model.network"].partition(":")
        return library, arch
    return None


def read_shape(network: Mapping[str, str], state: Mapping[str, torch.Tensor]) -> NetworkShape:
    """The shape of the network ``network`` names (model settings, as
    :func:`~lab.nn.networks.network_overrides` gives them) that the weights ``state`` hold, and its library's
    inputs; an empty shape for the lab's own models (whose shape comes from the data) and for an architecture its
    library does not know (its builder says so)."""
    found = library_network(network)
    if found is None:
        return NetworkShape()
    library, arch = found
    if library == "timm":
        return _timm_shape(arch, state, vit=network.get("model.name") == "timm_vit")
    return _torchvision_shape(arch, state, resnet=network.get("model.name") == "torchvision_resnet")


RESAMPLE = {2: "bilinear", 3: "bicubic"}
"""A Hugging Face image processor's ``resample`` (PIL's codes) as the input stage's interpolation."""


def hf_shape(config: Mapping[str, object], preprocessor: Mapping[str, object] | None) -> NetworkShape:
    """The shape of a Hugging Face network from its ``config.json`` (a vision encoder's ``num_channels``,
    ``image_size``, ``patch_size``; a classifier's ``num_labels``) and its inputs from its
    ``preprocessor_config.json`` (``size``, ``image_mean``, ``image_std``, ``resample``); an empty shape for a
    language model, whose inputs are token ids."""
    if "num_channels" not in config:
        return NetworkShape()
    side = config.get("image_size")
    side = side[0] if isinstance(side, list | tuple) else side
    classifier = any(str(a).endswith("ForImageClassification") for a in config.get("architectures") or [])
    heads = config.get("id2label")
    library = None
    if preprocessor and "image_mean" in preprocessor and "image_std" in preprocessor:
        size = preprocessor.get("size")
        size = size.get("height", side) if isinstance(size, dict) else size or side
        library = LibraryInputs(int(size), tuple(preprocessor["image_mean"]), tuple(preprocessor["image_std"]),
                                RESAMPLE.get(preprocessor.get("resample"), "bilinear"),
                                "the model's preprocessor_config.json")
    return NetworkShape(in_chans=int(config["num_channels"]),
                        head_classes=(len(heads) if isinstance(heads, dict) else None) if classifier else None,
                        img_size=int(side) if side else None,
                        patch_size=int(config["patch_size"]) if config.get("patch_size") else None, library=library)


def _dim(state: Mapping[str, torch.Tensor], key: str | None, ndim: int, axis: int) -> int | None:
    tensor = state.get(f"{key}.weight") if key else None
    return int(tensor.shape[axis]) if isinstance(tensor, torch.Tensor) and tensor.ndim == ndim else None


def _timm_shape(arch: str, state: Mapping[str, torch.Tensor], vit: bool) -> NetworkShape:
    from timm.data import resolve_data_config
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(arch)
    if cfg is None:
        return NetworkShape()
    first = cfg.first_conv[0] if isinstance(cfg.first_conv, (tuple, list)) else cfg.first_conv
    head = cfg.classifier[0] if isinstance(cfg.classifier, (tuple, list)) else cfg.classifier
    data = resolve_data_config(pretrained_cfg=cfg.to_dict())
    library = LibraryInputs(int(data["input_size"][-1]), tuple(data["mean"]), tuple(data["std"]),
                            str(data["interpolation"]), "timm pretrained_cfg")
    shape = NetworkShape(in_chans=_dim(state, first, 4, 1), head_classes=_dim(state, head, 2, 0), library=library)
    if not vit:
        return shape
    patch = state.get("patch_embed.proj.weight")
    if not isinstance(patch, torch.Tensor) or patch.ndim != 4 or patch.shape[-1] != patch.shape[-2]:
        return shape
    size = int(patch.shape[-1])
    grid = _grid(state)
    return NetworkShape(shape.in_chans, shape.head_classes, grid * size if grid else None, size,
                        LibraryInputs(grid * size, library.mean, library.std, library.interpolation,
                                      library.source) if grid else library)


def _grid(state: Mapping[str, torch.Tensor]) -> int | None:
    """A ViT's patches per side: its position embedding's entries less the class and register tokens (or all of
    them, for a ViT that embeds no position for those), when they make a square."""
    pos = state.get("pos_embed")
    if not isinstance(pos, torch.Tensor) or pos.ndim != 3:
        return None
    tokens = int(pos.shape[1])
    register = state.get("reg_token")
    prefix = ("cls_token" in state) + (int(register.shape[1]) if isinstance(register, torch.Tensor)
                                       and register.ndim == 3 else 0)
    for patches in (tokens - prefix, tokens):
        side = math.isqrt(max(patches, 0))
        if patches > 0 and side * side == patches:
            return side
    return None


def _torchvision_shape(arch: str, state: Mapping[str, torch.Tensor], resnet: bool) -> NetworkShape:
    if resnet:
        in_chans, head = _dim(state, "conv1", 4, 1), _dim(state, "fc", 2, 0)
    else:  # the first convolution and the last linear layer, in the file's (registration) order
        first = next((t for t in state.values() if t.ndim == 4), None)
        last = next((t for k, t in reversed(state.items()) if k.endswith(".weight") and t.ndim == 2), None)
        in_chans = int(first.shape[1]) if first is not None else None
        head = int(last.shape[0]) if last is not None else None
    return NetworkShape(in_chans=in_chans, head_classes=head, library=_torchvision_inputs(arch))


def _torchvision_inputs(arch: str) -> LibraryInputs:
    import torchvision

    try:
        transform = torchvision.models.get_model_weights(arch).DEFAULT.transforms()
        return LibraryInputs(int(transform.crop_size[0]), tuple(transform.mean), tuple(transform.std),
                             transform.interpolation.value, "torchvision's ImageNet transforms")
    except (ValueError, KeyError, AttributeError, IndexError, TypeError):  # no weights listed for it
        return LibraryInputs(224, *IMAGENET, "bilinear", "torchvision's ImageNet defaults")
