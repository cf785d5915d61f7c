"""Weights from a file someone else wrote (a release, a colleague's cluster run), loaded safely and loudly.

Only tensors are read: a ``.safetensors`` file, or a PyTorch file through ``torch.load(weights_only=True)``; a file
that holds pickled objects (a whole model, a custom class) is refused, as loading it would run its code. The common
layouts are unwrapped — a release's ``{"model": …}`` (the MAE's), ``{"state_dict": …}``, the lab's own checkpoints —
and the common prefixes stripped when every key carries one: ``module.`` (DDP), ``_orig_mod.`` (``torch.compile``).
The keys are then matched against the model's: missing, unexpected and mismatched-shape keys are listed, and any of
them refuses the load unless ``strict=False``. Nothing is fetched from a hub: the lab runs offline.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

WRAPPERS = ("model", "state_dict", "model_state", "module")
"""Keys under which a checkpoint holds its weights (tried in this order when the file is not itself a state dict)."""
PREFIXES = ("module.", "_orig_mod.")
"""Prefixes stripped when every key carries one (DDP's wrapper, ``torch.compile``'s)."""
LISTED = 10
"""The most keys of each kind a refusal names (it gives the count of the rest)."""


class WeightsError(ValueError):
    """A weights file that cannot be loaded into the model; the message says why and which keys."""


@dataclass
class LoadReport:
    """How a file's weights matched a model: what it lacked, what it had besides, what had another shape."""

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)  # "key: file's shape ≠ model's shape"
    loaded: int = 0

    @property
    def exact(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    def text(self) -> str:
        """Each kind of difference, with at most :data:`LISTED` keys named."""
        parts = []
        for what, keys in (("missing from the file", self.missing), ("unexpected in the file", self.unexpected),
                           ("of another shape", self.mismatched)):
            if keys:
                more = f" and {len(keys) - LISTED} more" if len(keys) > LISTED else ""
                parts.append(f"{len(keys)} {what}: {', '.join(keys[:LISTED])}{more}")
        return "; ".join(parts) or "every key matched"


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a weights file, unwrapped and with a common prefix stripped (see the module).

    Raises:
        FileNotFoundError: no such file.
        WeightsError: it holds pickled objects, or no state dict of tensors.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no weights file {path}")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            state = load_file(str(path), device="cpu")
        except Exception as err:  # safetensors raises its own error types for a damaged header
            raise WeightsError(f"{path} is not a readable safetensors file ({err})") from None
    else:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:
            raise WeightsError(f"{path} holds pickled objects, not only tensors: the lab does not load it, as that "
                               "would run code from the file. Save the model's state_dict() (or safetensors) "
                               "instead") from None
        except (RuntimeError, EOFError, OSError) as err:
            raise WeightsError(f"{path} is not a readable PyTorch file ({err})") from None
    return _prefix_stripped(_unwrapped(state, path))


def _unwrapped(state: object, path: Path) -> dict[str, torch.Tensor]:
    if isinstance(state, dict) and not _is_state_dict(state):
        for key in WRAPPERS:
            if _is_state_dict(state.get(key)):
                return state[key]
    if not _is_state_dict(state):
        keys = list(state)[:LISTED] if isinstance(state, dict) else type(state).__name__
        raise WeightsError(f"{path} holds no state dict of tensors (found {keys}; looked under "
                           f"{', '.join(WRAPPERS)})")
    return state


def _is_state_dict(value: object) -> bool:
    return isinstance(value, dict) and bool(value) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items())


def _prefix_stripped(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    for prefix in PREFIXES:
        if all(k.startswith(prefix) for k in state):
            state = {k.removeprefix(prefix): v for k, v in state.items()}
    return state


def match(model: nn.Module, state: dict[str, torch.Tensor]) -> LoadReport:
    """How ``state``'s keys and shapes match ``model``'s."""
    own = model.state_dict()
    report = LoadReport(missing=[k for k in own if k not in state], unexpected=[k for k in state if k not in own])
    report.mismatched = [f"{k}: {tuple(v.shape)} ≠ {tuple(own[k].shape)}" for k, v in state.items()
                         if k in own and v.shape != own[k].shape]
    return report


def load_weights(model: nn.Module, path: str | Path, *, strict: bool = True) -> LoadReport:
    """Load the weights file ``path`` into ``model``; returns how its keys matched.

    Args:
        model: the network the weights are for (built with the same architecture).
        path: a ``.safetensors`` file or a PyTorch file of tensors.
        strict: refuse any missing, unexpected or mismatched key (False: load what matches, report the rest).

    Raises:
        FileNotFoundError, WeightsError: see :func:`read_state_dict`; and, when ``strict``, keys that do not match
            (every kind named, with the first keys of each).
    """
    state = read_state_dict(path)
    report = match(model, state)
    if strict and not report.exact:
        raise WeightsError(f"{Path(path).name} does not fit {type(model).__name__}: {report.text()} (load it anyway, "
                           "keeping the model's own values there, with strict=False / --strict false)")
    own = model.state_dict()
    fitting = {k: v for k, v in state.items() if k in own and v.shape == own[k].shape}
    model.load_state_dict(fitting, strict=False)
    report.loaded = len(fitting)
    return report
