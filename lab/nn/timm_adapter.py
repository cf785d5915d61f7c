"""timm ResNets (resnet18/34/50, resnet50d, …) behind the lab's model surface, block by block.

timm groups blocks into ``layer1 … layer4`` and reports stage-level intermediates; the lab's analyses need every
block. :class:`TimmResNet` names the blocks ``blocks.{i}`` over all stages in order and gives each a
:class:`TimmBlock` view with the parts of :class:`lab.nn.block.ResidualBlock`: ``branch`` (the conv path F alone,
so ``J_i = ∂F_i/∂h_i`` can be taken), ``alpha = beta = 1``, ``drop_path``, ``post_act`` (timm's BasicBlock and
Bottleneck add the shortcut, then apply ReLU) and ``shortcut``. The first block of stages 2–4 (and of stage 1 in
Bottleneck nets) has a downsample projection on its shortcut and maps one space to a different one; it is marked
``has_projection`` so analyses can skip it or treat its rectangular Jacobian apart.

The adapter runs the model through those views, so probes (:func:`lab.hooks.capture`) see every block's input,
output and branch. Weights are never downloaded (``pretrained=False``); load a checkpoint into ``.model`` instead. A
network imported from a weights file may take other inputs than the lab's tensors (RGB at 224 px, its library's
mean and std): its ``input_stage`` (:class:`~lab.nn.input_stage.InputStage`, the builders' ``inputs``) makes them,
first thing in :meth:`TimmResNet.stem`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import nn

from lab.nn.droppath import DropPath
from lab.nn.input_stage import InputStage, input_stage
from lab.nn.intermediates import check_format, collect, last_state
from lab.nn.registry import register_model, signature_of

__all__ = ["TimmBlock", "TimmBranch", "TimmResNet", "TorchvisionResNet", "set_drop_path", "timm_resnet"]


class TimmBranch(nn.Module):
    """The residual branch F of a timm BasicBlock or Bottleneck: everything before the shortcut is added.

    BasicBlock: ``conv1 → bn1 → drop_block → act1 → aa → conv2 → bn2 → se``; Bottleneck: ``conv1 → bn1 → act1 →
    conv2 → bn2 → drop_block → act2 → aa → conv3 → bn3 → se`` (timm's order; drop_block is identity in eval).
    Shares the block's modules, it does not own copies.
    """

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        bottleneck = hasattr(block, "conv3")
        if torchvision_block(block):  # one ReLU module, used after each norm but the last
            names = (("conv1", "bn1", "relu", "conv2", "bn2", "relu", "conv3", "bn3") if bottleneck
                     else ("conv1", "bn1", "relu", "conv2", "bn2"))
        else:
            names = (("conv1", "bn1", "act1", "conv2", "bn2", "drop_block", "act2", "aa", "conv3", "bn3")
                     if bottleneck else ("conv1", "bn1", "drop_block", "act1", "aa", "conv2", "bn2"))
        self.path = nn.Sequential(*(getattr(block, n) for n in names))
        self.se = getattr(block, "se", None) or nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.se(self.path(x))


def torchvision_block(block: nn.Module) -> bool:
    """Whether ``block`` is a torchvision ``BasicBlock`` or ``Bottleneck`` (one ``relu`` module) rather than timm's."""
    return hasattr(block, "relu") and not hasattr(block, "act1")


class TimmBlock(nn.Module):
    """A timm (or torchvision) residual block seen as ``post_act(shortcut(x) + drop_path(F(x)))``, with the lab's
    named parts.

    Args:
        block: a timm ``BasicBlock`` or ``Bottleneck`` (not copied: the view and the timm model share it).
    """

    alpha = 1.0
    beta = 1.0

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block
        self.branch = TimmBranch(block)
        self.post_act = block.relu if torchvision_block(block) else block.act3 if hasattr(block, "act3") \
            else block.act2
        if not hasattr(block, "drop_path"):  # torchvision's blocks have none; the lab's can be set
            block.drop_path = None

    @property
    def has_projection(self) -> bool:
        """Whether the shortcut is a downsample projection (then the block maps ``[C, H, W]`` to another shape)."""
        return self.block.downsample is not None

    @property
    def drop_path(self) -> nn.Module | None:
        """The block's drop path module (None when stochastic depth is off)."""
        return self.block.drop_path

    def set_drop_path_rate(self, rate: float) -> None:
        """Install a lab :class:`DropPath` (so droppath and ResidualDroppath modes apply) with this rate."""
        self.block.drop_path = DropPath(rate) if rate > 0 else None

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        """The skip path: x itself, or its downsample projection."""
        return x if self.block.downsample is None else self.block.downsample(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.branch(x)  # F(x)
        if self.block.drop_path is not None:
            f = self.block.drop_path(f)  # per-sample drop (stochastic depth), timm's or the lab's
        return self.post_act(self.shortcut(x) + f)


class TimmResNet(nn.Module):
    """A timm ResNet with the lab's model surface: ``iter_blocks``, per-block ``forward_intermediates``.

    ``self.model`` is the timm model and owns every parameter (its ``state_dict`` keys are unchanged); the block
    views are kept outside the module tree so nothing is registered twice.

    Args:
        model: a ``timm.models.ResNet``.
        inputs: what makes the lab's tensors into the network's inputs (None: it takes them as they are); it holds
            no weights, so the state dict is the network's.
    """

    def __init__(self, model: nn.Module, inputs: InputStage | None = None) -> None:
        super().__init__()
        self.model = model
        self.input_stage = inputs
        self.num_classes = model.fc.out_features if isinstance(model.fc, nn.Linear) else model.num_classes
        stages = [getattr(model, f"layer{s}") for s in range(1, 5)]
        self._views = [TimmBlock(b) for stage in stages for b in stage]  # a list, so not registered as children

    def train(self, mode: bool = True) -> TimmResNet:
        super().train(mode)
        for view in self._views:  # the views' own flags follow (their modules already do, through self.model)
            view.train(mode)
        return self

    def iter_blocks(self) -> Iterator[tuple[str, TimmBlock]]:
        """``("blocks.{i}", block view)`` over all stages in forward order."""
        for i, view in enumerate(self._views):
            yield f"blocks.{i}", view

    def adapt(self, x: torch.Tensor) -> torch.Tensor:
        """The lab's tensors as the network's inputs (through :attr:`input_stage`, when there is one)."""
        return x if self.input_stage is None else self.input_stage(x)

    def stem(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, in_chans, H, W]`` → h_0 ``[B, C, H/4, W/4]`` (conv, norm, act, max-pool), after the input stage."""
        m = self.model
        return m.maxpool(m.act1(m.bn1(m.conv1(self.adapt(x)))))

    def pool(self, h: torch.Tensor) -> torch.Tensor:
        """h_L ``[B, C, H, W]`` → pooled features ``[B, C]`` (timm's pre-logits)."""
        return self.model.forward_head(h, pre_logits=True)

    def no_weight_decay(self) -> set[str]:
        """What the timm model's ``no_weight_decay()`` names (none for timm's ResNets), under ``model.``."""
        inner = self.model.no_weight_decay() if hasattr(self.model, "no_weight_decay") else ()
        return {f"model.{name}" for name in inner}

    def _stream(self, x: torch.Tensor) -> Iterator[torch.Tensor]:
        """Yields h_0 (the stem's output), then each block's output ``[B, C_i, H_i, W_i]``."""
        h = self.stem(x)
        yield h
        for view in self._views:
            h = view(h)
            yield h

    def forward_intermediates(self, x: torch.Tensor, indices: int | Sequence[int] | None = None, norm: bool = False,
                              stop_early: bool = False, output_fmt: str = "NCHW", intermediates_only: bool = False
                              ) -> list[torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        """Every block's residual stream (not timm's stage-level intermediates), with timm's signature and
        meaning (:mod:`lab.nn.intermediates`).

        Args:
            x: ``[B, in_chans, H, W]``.
            indices: states to return among h_0, …, h_L (None: all L + 1).
            norm: accepted for timm's signature; not applied, as in timm's ResNet.
            stop_early: with ``intermediates_only``, stop at the last selected state.
            output_fmt: ``NCHW``.
            intermediates_only: return only the states.

        Returns:
            ``(features [B, F], states)`` with the pooled features of :meth:`forward_features` (``forward_head``
            maps them to logits), or only ``states``: h_0 = stem output, h_{i+1} = block i's output
            ``[B, C_i, H_i, W_i]``; h_L equals timm's ``forward_features``.
        """
        check_format(output_fmt, ("NCHW",))
        states, last = collect(self._stream(x), len(self._views) + 1, indices, stop_early and intermediates_only)
        return states if intermediates_only else (self.pool(last), states)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, in_chans, H, W]`` → pooled features ``[B, F]`` (timm's pre-logits)."""
        return self.pool(last_state(self._stream(x)))

    def forward_head(self, features: torch.Tensor) -> torch.Tensor:
        """``[B, F] -> [B, classes]``."""
        return self.model.fc(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


class TorchvisionResNet(TimmResNet):
    """A torchvision ResNet (``resnet18`` … ``resnet152``, ``resnext``, ``wide_resnet``) with the lab's model surface,
    as :class:`TimmResNet` gives timm's: the same block views over torchvision's ``BasicBlock`` and ``Bottleneck``
    (whose ReLU after the sum is ``post_act``), the stem ``conv1 → bn1 → relu → maxpool`` and the head ``avgpool →
    fc``. ``self.model`` owns every parameter under torchvision's own keys.

    Args:
        model: a ``torchvision.models.ResNet``.
    """

    def stem(self, x: torch.Tensor) -> torch.Tensor:
        m = self.model
        return m.maxpool(m.relu(m.bn1(m.conv1(self.adapt(x)))))

    def pool(self, h: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.model.avgpool(h), 1)


def set_drop_path(model: nn.Module, rate: float, *, schedule: str = "linear") -> list[float]:
    """Set stochastic depth on every block of a lab model or :class:`TimmResNet`.

    ``linear`` is timm's ``drop_path_rate`` rule: block i of L drops with probability rate · i / (L − 1) (0 for the
    first block); ``constant`` gives every block ``rate`` (Fig. 5 of *Residual Alignment: Uncovering the Mechanisms
    of Residual Networks* drops every block with 0.3). The drops are lab :class:`DropPath` modules, so the trainer's
    droppath / ResidualDroppath modes apply to timm nets too.

    Returns:
        The rate of each block.
    """
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"drop-path rate must be in [0, 1); got {rate}")
    blocks = [b for _, b in model.iter_blocks()]
    L = len(blocks)
    if schedule == "linear":
        rates = [rate * i / (L - 1) if L > 1 else rate for i in range(L)]
    elif schedule == "constant":
        rates = [rate] * L
    else:
        raise ValueError(f"unknown drop schedule {schedule!r}; valid: linear, constant")
    for block, r in zip(blocks, rates, strict=True):
        if isinstance(block, TimmBlock):
            block.set_drop_path_rate(r)
        elif isinstance(getattr(block, "drop_path", None), DropPath):
            block.drop_path.rate = float(r)
        else:
            raise TypeError(f"{type(block).__name__} has no lab DropPath to set")
    return rates


@register_model(family="timm_resnet", example={"num_classes": 3, "arch": "resnet18"}, input_shape=(3, 32, 32))
def timm_resnet(arch: str = "resnet18", num_classes: int = 1000, in_chans: int = 3, drop_path_rate: float = 0.0,
                zero_init: bool = False, inputs: dict | None = None, **timm_kwargs) -> TimmResNet:
    """A timm ResNet by name (``resnet18``, ``resnet34``, ``resnet50``, ``resnet50d``, …), never pretrained.

    Args:
        arch: a timm ResNet architecture name (not ``name``: that is :func:`~lab.nn.create_model`'s own argument).
        num_classes: classifier outputs.
        in_chans: input channels.
        drop_path_rate: stochastic depth, timm's linear rule (:func:`set_drop_path`).
        zero_init: zero the last norm of every branch (timm's ``zero_init_last``; timm's default is True, the
            lab's is False so an untrained net has non-zero residual Jacobians).
        inputs: the settings of an input stage (:class:`~lab.nn.input_stage.InputStage`) that makes the lab's
            tensors into this network's inputs; an imported network's (None: it takes them as they are).
        **timm_kwargs: passed on to ``timm.create_model``.
    """
    import timm  # imported here: it takes seconds, and only these builders need it

    if arch not in timm.list_models(module="resnet"):
        raise ValueError(f"timm's {arch!r} is no ResNet (nor a ViT): the lab sees timm's and torchvision's ResNets "
                         "and timm's ViTs block by block")
    stage = input_stage(inputs)
    model = timm.create_model(arch, pretrained=False, num_classes=num_classes, in_chans=in_chans,
                              zero_init_last=zero_init, **timm_kwargs)
    adapter = TimmResNet(model, stage)
    if drop_path_rate > 0:
        set_drop_path(adapter, drop_path_rate)
    return adapter


@register_model(family="torchvision_resnet", example={"num_classes": 3, "arch": "resnet18"}, input_shape=(3, 32, 32))
def torchvision_resnet(arch: str = "resnet18", num_classes: int = 1000, in_chans: int = 3,
                       drop_path_rate: float = 0.0, inputs: dict | None = None) -> TorchvisionResNet:
    """A torchvision ResNet by name (``resnet18`` … ``resnet152``, ``resnext50_32x4d``, ``wide_resnet50_2``), never
    pretrained: what a weights file written by torchvision's training loads into (its keys, under ``model.``).

    Args:
        arch: a torchvision ResNet architecture name.
        num_classes: classifier outputs.
        in_chans: input channels (torchvision's stem takes 3; another count gets a stem convolution of its own).
        drop_path_rate: stochastic depth, timm's linear rule (:func:`set_drop_path`).
        inputs: the settings of an input stage (:class:`~lab.nn.input_stage.InputStage`), as :func:`timm_resnet`
            takes them.

    Raises:
        ValueError: ``arch`` is not a torchvision ResNet.
    """
    import torchvision

    stage = input_stage(inputs)
    model = torchvision.models.get_model(arch, weights=None, num_classes=num_classes)
    if type(model).__name__ != "ResNet":
        raise ValueError(f"torchvision's {arch!r} is no ResNet")
    if in_chans != 3:
        conv = model.conv1
        model.conv1 = nn.Conv2d(in_chans, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                                bias=False)
    adapter = TorchvisionResNet(model, stage)
    if drop_path_rate > 0:
        set_drop_path(adapter, drop_path_rate)
    return adapter


@register_model(family="timm_resnet", example={"num_classes": 3}, input_shape=(3, 32, 32))
@signature_of(timm_resnet, drop=("arch",))
def timm_resnet18(**kwargs) -> TimmResNet:
    """timm ``resnet18``: 8 BasicBlocks."""
    return timm_resnet("resnet18", **kwargs)


@register_model(family="timm_resnet", example={"num_classes": 3}, input_shape=(3, 32, 32))
@signature_of(timm_resnet, drop=("arch",))
def timm_resnet34(**kwargs) -> TimmResNet:
    """timm ``resnet34``: 16 BasicBlocks."""
    return timm_resnet("resnet34", **kwargs)


@register_model(family="timm_resnet", example={"num_classes": 3}, input_shape=(3, 32, 32))
@signature_of(timm_resnet, drop=("arch",))
def timm_resnet50(**kwargs) -> TimmResNet:
    """timm ``resnet50``: 16 Bottlenecks."""
    return timm_resnet("resnet50", **kwargs)


@register_model(family="timm_resnet", example={"num_classes": 3}, input_shape=(3, 32, 32))
@signature_of(timm_resnet, drop=("arch",))
def timm_resnet50d(**kwargs) -> TimmResNet:
    """timm ``resnet50d``: 16 Bottlenecks, deep stem, average-pool downsampling.

    The ResNet50d of *ResidualDroppath: Enhancing Feature Reuse over Residual Connections*.
    """
    return timm_resnet("resnet50d", **kwargs)
