"""A network read as residual steps that share its modules (timm's ViTs, the lab's MAE as sub-layers, a network's
blocks named by pattern): the network under ``.model``, its steps named ``blocks.{j}``; the base of each."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from torch import Tensor, nn

__all__ = ["ResidualSteps"]


class ResidualSteps(nn.Module):
    """``model`` seen through ``steps`` (modules built on ``model``'s own, owning nothing new).

    The steps are kept in a list, not registered: their parameters are ``model``'s, under its keys, so the view's
    state dict is ``model.``'s. :meth:`train` reaches them as it reaches ``model``.
    """

    def __init__(self, model: nn.Module, steps: Sequence[nn.Module]) -> None:
        super().__init__()
        self.model = model
        self._steps = [(f"blocks.{j}", step) for j, step in enumerate(steps)]

    def train(self, mode: bool = True) -> ResidualSteps:
        super().train(mode)
        for _, step in self._steps:
            step.train(mode)
        return self

    def iter_blocks(self) -> Iterator[tuple[str, nn.Module]]:
        """``("blocks.{j}", step)`` in forward order."""
        yield from self._steps

    def stem(self, x: Tensor) -> Tensor:
        """The stream's first state h_0, for a view whose steps follow each other directly (:meth:`_stream`)."""
        raise NotImplementedError(f"{type(self).__name__} reads its stream otherwise")

    def _stream(self, x: Tensor) -> Iterator[Tensor]:
        """h_0 = :meth:`stem`, then each step's output in turn."""
        h = self.stem(x)
        yield h
        for _, step in self._steps:
            h = step(h)
            yield h
