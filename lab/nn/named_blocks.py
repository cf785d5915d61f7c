"""Any network whose residual blocks you name: ``--blocks "stages.*.blocks.*"``.

The lab's adapters know the blocks of ResNets and ViTs (:mod:`lab.nn.networks`); for any other network (a ConvNeXt,
a Swin, your own), :class:`NamedBlocks` takes the modules whose names match a pattern (``fnmatch``: ``*`` also
crosses dots; the outermost match wins) as its residual blocks, and reads the stream by running the network itself:
forward hooks record each block's input h_i and the last block's output h_L, so everything between blocks (a
ConvNeXt's downsampling, a Swin's patch merging) runs as the network runs it.

A named block must compute ``block(h) = h + F(h)``, an identity shortcut around its whole body, with its output
shaped as its input: its branch is then ``F(h) = block(h) − h`` and its residual Jacobian ``∂F/∂h`` (the lab's
convention: the skip excluded). That holds for pre-norm blocks (ViT, ConvNeXt, Swin, pre-activation ResNets); a
block with a projection or an activation after the sum (post-activation ResNets: ``ReLU(h + F(h))``) is not of this
form, and ``block(h) − h`` would then not be its branch — the dedicated adapters see those exactly. Both are checked
(:func:`check_identity_block`): the block's code is traced (``torch.fx``) and its output must be a sum with the
block's input as one term, through nothing but reshapes and identities — else the module applied after the sum is
named; a block that cannot be traced is checked on the inputs it receives (an output clamped at exactly zero where
the input is not, as an activation after the sum clamps it, is refused). The view has no separate head: its
features are the network's output.
"""

from __future__ import annotations

import fnmatch
import operator
from collections.abc import Sequence

import torch
from torch import fx, nn

from lab.nn.intermediates import check_format, collect
from lab.nn.registry import register_model
from lab.nn.residual_steps import ResidualSteps

__all__ = ["MAX_PATTERN_CHARS", "NamedBlock", "NamedBlocks", "check_identity_block", "check_pattern", "match_blocks",
           "named_blocks"]

MAX_PATTERN_CHARS = 256
"""The longest ``--blocks`` pattern taken: module names are far shorter, and turning a pattern into a matcher costs
time that grows with the square of its length (thousands of ``[`` take seconds to minutes)."""


def check_pattern(pattern: str) -> str:
    """``pattern``, once it is known to be short enough to match with.

    Raises:
        ValueError: longer than :data:`MAX_PATTERN_CHARS`.
    """
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"the --blocks pattern is {len(pattern):,} characters long; the lab takes at most "
                         f"{MAX_PATTERN_CHARS}: name the blocks' modules with * and ? (e.g. 'stages.*.blocks.*')")
    return pattern


def match_blocks(model: nn.Module, pattern: str) -> list[tuple[str, nn.Module]]:
    """The modules of ``model`` whose names match ``pattern``, outermost matches only, in registration order.

    Raises:
        ValueError: nothing matches (the message names the network's modules, two levels deep), or a pattern longer
            than :data:`MAX_PATTERN_CHARS`.
    """
    check_pattern(pattern)
    found: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if name and fnmatch.fnmatchcase(name, pattern) and not any(name.startswith(f"{n}.") for n, _ in found):
            found.append((name, module))
    if not found:
        names = [n for n, _ in model.named_modules() if n and n.count(".") <= 1][:30]
        raise ValueError(f"no module of {type(model).__name__} matches --blocks {pattern!r}; its modules include "
                         f"{', '.join(names) or 'none'}")
    return found


_SUMS = {operator.add, operator.iadd, torch.add}
_LAYOUT_METHODS = {"reshape", "view", "flatten", "unflatten", "contiguous", "permute", "transpose"}
_LAYOUT_FUNCTIONS = {torch.reshape, torch.flatten, torch.permute, torch.transpose}
CLAMPED_SHARE = 0.05
"""A block whose output is exactly 0 at more than this share of the entries where its input is not is refused:
h + F(h) is almost never exactly 0, an activation after the sum (ReLU) makes about half of them so."""


def _is_sum(node: fx.Node) -> bool:
    return (node.op == "call_function" and node.target in _SUMS) or (node.op == "call_method"
                                                                       and node.target in ("add", "add_"))


def _carries_input(node: object, modules: dict[str, nn.Module]) -> bool:
    """Whether a traced value is the block's input plus something: the input itself, through identities and
    reshapes, or a sum with such a term."""
    if not isinstance(node, fx.Node):
        return False
    if node.op == "placeholder":
        return True
    if node.op == "call_module" and isinstance(modules.get(str(node.target)), nn.Identity) or (
            node.op == "call_method" and node.target in _LAYOUT_METHODS) or (
            node.op == "call_function" and node.target in _LAYOUT_FUNCTIONS):
        return bool(node.args) and _carries_input(node.args[0], modules)
    if _is_sum(node):
        return any(_carries_input(a, modules) for a in node.args)
    return False


def _described(node: fx.Node, modules: dict[str, nn.Module]) -> str:
    if node.op == "call_module":
        return f"{node.target} ({type(modules[str(node.target)]).__name__})"
    return str(getattr(node.target, "__name__", node.target))


def check_identity_block(name: str, block: nn.Module) -> bool:
    """Check from its code that ``block`` computes ``h + F(h)``: its output is a sum with its input as one term.

    The block is traced symbolically (``torch.fx``, no data); its output is followed back through reshapes,
    identities and sums to the block's input.

    Returns:
        True when the trace shows the identity shortcut; False when the block cannot be traced (data-dependent
        control flow): :class:`NamedBlocks` then checks it on the inputs it receives.

    Raises:
        ValueError: the trace shows another form — an activation or any other module applied after the sum (a
            post-activation block, named), or a sum whose terms do not include the input (a projection shortcut).
    """
    try:
        graph = fx.symbolic_trace(block).graph
    except Exception:  # noqa: BLE001 - any tracing failure means "not decidable from the code"
        return False
    modules = dict(block.named_modules())
    result = next(n for n in graph.nodes if n.op == "output").args[0]
    if not isinstance(result, fx.Node):
        return False
    if _carries_input(result, modules):
        return True
    node, after = result, []
    while isinstance(node, fx.Node) and not _is_sum(node) and node.args and isinstance(node.args[0], fx.Node):
        after.append(node)
        node = node.args[0]
    hint = ("; timm's and torchvision's ResNets need no --blocks: the lab's adapter sees their blocks exactly")
    if isinstance(node, fx.Node) and _is_sum(node) and _carries_input(node, modules):
        applied = ", ".join(_described(n, modules) for n in reversed(after))
        raise ValueError(f"{name} is no residual block h + F(h): {applied} is applied after the sum (a "
                         f"post-activation block), so block(h) − h is not its residual branch{hint}")
    raise ValueError(f"{name} is no residual block h + F(h): its output is not a sum with its input as one term "
                     f"(a projection shortcut, or no shortcut){hint}")


class _Branch(nn.Module):
    """``F(h) = block(h) − h``: the body of an identity-shortcut block (a view; owns nothing)."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self._block = [block]  # a list, not a submodule: the network owns the block

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self._block[0](h) - h


class NamedBlock(nn.Module):
    """One named module seen as a residual block ``h + F(h)`` (α = β = 1, no post-activation)."""

    alpha = 1.0
    beta = 1.0
    post_act = None

    def __init__(self, name: str, block: nn.Module) -> None:
        super().__init__()
        self.name = name
        self.branch = _Branch(block)

    @property
    def module(self) -> nn.Module:
        """The network's own module this block views."""
        return self.branch._block[0]

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.module(h)


class NamedBlocks(ResidualSteps):
    """``model`` with the lab's model surface, its residual blocks named by ``pattern``.

    Args:
        model: any network taking images ``[B, C, H, W]``.
        pattern: the blocks' module names, as an ``fnmatch`` pattern (``layer*.*``, ``stages.*.blocks.*``).

    Raises:
        ValueError: no module matches.
    """

    def __init__(self, model: nn.Module, pattern: str) -> None:
        blocks = match_blocks(model, pattern)
        traced = [check_identity_block(name, m) for name, m in blocks]
        super().__init__(model, [NamedBlock(name, m) for name, m in blocks])
        self.pattern = pattern
        self.num_classes = getattr(model, "num_classes", None)
        self._untraced = [i for i, ok in enumerate(traced) if not ok]  # checked on their inputs as they run

    def _run(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The network's output and its stream: every named block's input, then the last one's output.

        Raises:
            ValueError: a block did not run exactly once, ran out of order, changed its input's shape, or (one
                whose code could not be traced) clamped its output at zero as an activation after the sum does.
        """
        seen: list[tuple[int, torch.Tensor, torch.Tensor]] = []

        def hook(i: int):
            def record(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
                seen.append((i, args[0], output))
            return record

        handles = [block.module.register_forward_hook(hook(i)) for i, (_, block) in enumerate(self._steps)]
        try:
            out = self.model(x)
        finally:
            for handle in handles:
                handle.remove()
        order = [i for i, _, _ in seen]
        if order != list(range(len(self._steps))):
            raise ValueError(f"the blocks --blocks {self.pattern!r} names must each run once, in order; they ran as "
                             f"{order[:20]}")
        for i, h, y in seen:
            if not isinstance(h, torch.Tensor) or not isinstance(y, torch.Tensor) or h.shape != y.shape:
                raise ValueError(f"{self._steps[i][1].name} is no residual block h + F(h): it maps "
                                 f"{tuple(getattr(h, 'shape', ()))} to {tuple(getattr(y, 'shape', ()))}")
        for i in self._untraced:
            _, h, y = seen[i]
            moving = h != 0
            share = float(((y == 0) & moving).sum()) / max(1, int(moving.sum()))
            if share > CLAMPED_SHARE:
                raise ValueError(f"{self._steps[i][1].name} is no residual block h + F(h): its output is exactly 0 "
                                 f"at {share:.0%} of the entries where its input is not, as an activation after the "
                                 "sum clamps it (a post-activation block), so block(h) − h is not its residual branch")
        return out, [h for _, h, _ in seen] + [seen[-1][2]]

    def forward_intermediates(self, x: torch.Tensor, indices: int | Sequence[int] | None = None, norm: bool = False,
                              stop_early: bool = False, output_fmt: str = "NCHW", intermediates_only: bool = False
                              ) -> list[torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        """The stream h_0 … h_L (each block's input, then the last block's output) as the network computes it
        (:mod:`lab.nn.intermediates`; the whole network runs, so ``stop_early`` saves nothing; ``norm`` is not
        defined for an arbitrary network and must be False)."""
        check_format(output_fmt, ("NCHW", "NLC"))
        if norm:
            raise ValueError("a network seen through --blocks has no final norm to apply")
        out, states = self._run(x)
        picked, _ = collect(iter(states), len(states), indices, False)
        return picked if intermediates_only else (out, picked)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The network's output (the view cannot tell its head from its body)."""
        return self.model(x)

    def forward_head(self, features: torch.Tensor) -> torch.Tensor:
        return features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def no_weight_decay(self) -> set[str]:
        own = dict(self.named_parameters())
        inner = self.model.no_weight_decay() if hasattr(self.model, "no_weight_decay") else set()
        return {f"model.{n}" for n in inner} & own.keys()


@register_model(family="named_blocks", example={"network": "timm:convnext_atto", "blocks": "stages.*.blocks.*",
                                                "num_classes": 3}, input_shape=(3, 32, 32))
def named_blocks(network: str = "timm:convnext_atto", blocks: str = "stages.*.blocks.*", num_classes: int = 1000,
                 in_chans: int = 3) -> NamedBlocks:
    """timm's or torchvision's ``network`` (never pretrained) with the residual blocks ``blocks`` names.

    Raises:
        ValueError: an unknown network, one torchvision builds for other than 3 channels, or no module matching.
    """
    from lab.nn.networks import build_network  # networks sees these views; this builder builds its networks

    library = network.partition(":")[0]
    if library == "timm":
        model = build_network(network, num_classes=num_classes, in_chans=in_chans)
    elif library == "torchvision":
        if in_chans != 3:
            raise ValueError(f"torchvision's networks take 3 input channels, not {in_chans}: analyse them on RGB data")
        model = build_network(network, num_classes=num_classes)
    else:
        raise ValueError(f"--blocks names the blocks of a timm:<arch> or torchvision:<arch> network, not {network!r}")
    return NamedBlocks(model, blocks)
