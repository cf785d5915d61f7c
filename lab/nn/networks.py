"""Any residual network by name, with weights from a file: the lab's own models, and timm's and torchvision's, seen
through the block views the lab's analyses take.

``timm:<arch>`` and ``torchvision:<arch>`` build that library's network (never pretrained: nothing is downloaded),
a registered name builds the lab's model (:func:`~lab.nn.registry.create_model`). Weights are read by
:func:`~lab.nn.weights.load_weights` into the library's own module, under its own keys, before it is wrapped (the
network built as the file says, :mod:`lab.nn.network_shape`); then :func:`residual_view` finds the residual blocks:
a lab model has them already, a timm or torchvision ResNet gets :class:`~lab.nn.timm_adapter.TimmResNet` /
:class:`~lab.nn.timm_adapter.TorchvisionResNet` (every block with its branch and shortcut, projection shortcuts
marked), a timm ViT :class:`~lab.nn.timm_vit.TimmViT` (attention and MLP as two residual steps per block). A network
whose blocks the lab cannot find is refused with the modules it has, by name. ``hf:DIR`` names a Hugging Face
``save_pretrained`` folder (:mod:`lab.nn.hf`: GPT-2, Llama-style decoders, ViT and DeiT, each sub-layer a residual
step); its weights are the folder's file, loaded by transformers (:func:`load_file`).
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from lab.nn.hf import HF_PREFIX, load_saved, saved_model
from lab.nn.mae import MaskedAutoencoderViT
from lab.nn.named_blocks import check_pattern
from lab.nn.network_shape import read_shape
from lab.nn.registry import create_model, list_models
from lab.nn.timm_adapter import TimmResNet, TorchvisionResNet
from lab.nn.timm_vit import TimmViT
from lab.nn.vit_steps import SublayerSteps
from lab.nn.weights import LoadReport, WeightsFile, load_state, read_weights

LIBRARY_BUILDERS = {"timm": "timm_resnet", "torchvision": "torchvision_resnet"}
"""``<library>:<arch>`` → the registered builder that takes ``arch`` (timm's ViTs: ``timm_vit``)."""
LIBRARIES = tuple(LIBRARY_BUILDERS)
"""The prefixes of a network that comes from a library rather than the lab's registry."""
WRAPPED = ("timm_resnet", "torchvision_resnet", "timm_vit", "named_blocks", "hf_transformer")
"""The builders whose model wraps the library's network as ``.model`` (the weights file's keys are that network's)."""
HF_BUILDER = "hf_transformer"
"""The registered builder of a Hugging Face network (``hf:DIR``)."""


def network_overrides(spec: str, blocks: str | None = None) -> dict[str, str]:
    """The config's model settings for ``spec`` (``timm:<arch>``, ``torchvision:<arch>``, ``hf:DIR`` or a registered
    model's name): the registered builder that wraps that network, and its ``arch`` (a Hugging Face network: its
    ``config.json``, read from the folder); with
    ``blocks``, the library network whose residual blocks that pattern names (:mod:`lab.nn.named_blocks`).

    Raises:
        FileNotFoundError: an ``hf:DIR`` that holds no ``config.json`` or weights file.
        ValueError: no such network, or ``blocks`` with a network other than a library's, or a pattern longer than
            :data:`~lab.nn.named_blocks.MAX_PATTERN_CHARS` (checked first: a long one is costly to match with)."""
    if spec.startswith(HF_PREFIX):
        if blocks:
            raise ValueError("--blocks names the blocks of a timm or torchvision network; the lab reads a Hugging Face "
                             "network's attention and MLP sub-layers itself")
        return {"model.name": HF_BUILDER, "model.config": saved_model(spec.removeprefix(HF_PREFIX)).config}
    library, sep, arch = spec.partition(":")
    if blocks:
        check_pattern(blocks)
        if library not in LIBRARY_BUILDERS or not arch:
            raise ValueError(f"--blocks names the blocks of a timm:<arch> or torchvision:<arch> network, not {spec!r}")
        return {"model.name": "named_blocks", "model.network": spec, "model.blocks": blocks}
    if not sep:
        return {"model.name": spec}
    if library not in LIBRARY_BUILDERS or not arch:
        raise ValueError(f"{spec!r} names no network: use {' or '.join(f'{k}:<arch>' for k in LIBRARY_BUILDERS)} "
                         "or a registered model")
    if library == "timm":
        import timm

        if arch in timm.list_models(module="vision_transformer"):
            return {"model.name": "timm_vit", "model.arch": arch}
    return {"model.name": LIBRARY_BUILDERS[library], "model.arch": arch}


def load_file(model: nn.Module, builder: str, weights: WeightsFile, *, strict: bool = True) -> LoadReport:
    """Load a weights file already read (:func:`~lab.nn.weights.read_weights`) into ``model``, the lab model the
    registered ``builder`` made: a Hugging Face network through transformers (:func:`~lab.nn.hf.load_saved`, which
    converts a saved file's keys), a wrapped library network into the library's module (under its keys), any other
    as it is.

    Raises:
        WeightsError: when ``strict``, keys that do not match.
    """
    if builder == HF_BUILDER:
        return load_saved(model, weights, strict=strict)
    return load_state(model.model if builder in WRAPPED else model, weights, strict=strict)


def build_network(name: str, **kwargs) -> nn.Module:
    """The network ``name`` (``timm:resnet50``, ``torchvision:resnet18``, or a registered lab model), untrained,
    as the library builds it (not yet wrapped).

    Raises:
        ValueError: an unknown library or model (the message lists what is known).
    """
    library, sep, arch = name.partition(":")
    if not sep:
        if name not in list_models():
            raise ValueError(f"unknown model {name!r}: a registered one ({', '.join(list_models())}) or "
                             f"{' / '.join(f'{lib}:<name>' for lib in LIBRARIES)}")
        return create_model(name, **kwargs)
    if library == "timm":
        import timm

        if not timm.is_model(arch):
            raise ValueError(f"timm has no model {arch!r}")
        return timm.create_model(arch, pretrained=False, **kwargs)
    if library == "torchvision":
        import torchvision

        if arch not in torchvision.models.list_models():
            raise ValueError(f"torchvision has no model {arch!r}")
        return torchvision.models.get_model(arch, weights=None, **kwargs)
    raise ValueError(f"unknown library {library!r} in {name!r}; known: {', '.join(LIBRARIES)}")


def residual_view(model: nn.Module) -> nn.Module:
    """``model`` with the lab's model surface (``iter_blocks``, per-block ``forward_intermediates``).

    Raises:
        ValueError: the lab cannot find its residual blocks; the message names the modules it has.
    """
    if hasattr(model, "iter_blocks") and hasattr(model, "forward_intermediates"):
        return model
    kind = f"{type(model).__module__}.{type(model).__name__}"
    if kind == "timm.models.resnet.ResNet":
        return TimmResNet(model)
    if kind == "torchvision.models.resnet.ResNet":
        return TorchvisionResNet(model)
    if kind == "timm.models.vision_transformer.VisionTransformer":
        return TimmViT(model)
    found = ", ".join(f"{n} ({type(m).__name__})" for n, m in list(model.named_children())[:12])
    raise ValueError(f"the lab cannot find the residual blocks of {kind}: it knows its own models, timm's and "
                     f"torchvision's ResNets and timm's ViTs; this network's modules are {found or 'none'} — name "
                     "its residual blocks with --blocks PATTERN (e.g. 'stages.*.blocks.*')")


def residual_steps(model: nn.Module) -> nn.Module:
    """``model`` as the residual steps the Residual Alignment and re-transformation analyses take: the lab's MAE
    with each encoder block's attention and MLP as two steps (:class:`~lab.nn.vit_steps.SublayerSteps`), as timm's
    ViTs are seen (:class:`~lab.nn.timm_vit.TimmViT`); every other model as it is."""
    return SublayerSteps(model) if isinstance(model, MaskedAutoencoderViT) else model


def open_network(name: str, weights: str | Path | None = None, *, strict: bool = True, **kwargs
                 ) -> tuple[nn.Module, LoadReport | None]:
    """The network ``name`` (:func:`build_network`) with the weights file ``weights`` (none: as initialised), seen
    through :func:`residual_view`, in eval mode; and how the file's keys matched.

    The network is built as the file says (:func:`~lab.nn.network_shape.read_shape`: a timm network's input
    channels, classes and a ViT's patch and image size; a torchvision network's classes), where ``kwargs`` leave
    those unset.

    Raises:
        ValueError: see :func:`build_network` and :func:`residual_view`; :class:`~lab.nn.weights.WeightsError` (a
            ValueError) for a file that cannot be loaded; FileNotFoundError: no such file.
    """
    if weights is None:
        return residual_view(build_network(name, **kwargs)).eval(), None
    file = read_weights(weights)
    library, sep, _ = name.partition(":")
    if sep and library in LIBRARY_BUILDERS:
        shape = read_shape(network_overrides(name), file.state)
        given = {"num_classes": shape.head_classes}
        if library == "timm":
            given.update(in_chans=shape.in_chans, img_size=shape.img_size, patch_size=shape.patch_size)
        kwargs = {**{k: v for k, v in given.items() if v is not None}, **kwargs}
    model = build_network(name, **kwargs)
    report = load_state(model, file, strict=strict)
    return residual_view(model).eval(), report
