"""What the lab needs beyond its core, and the message a missing piece gives.

The core (``pip install residual-lab``) trains, resumes, analyses and reproduces from the command line, the U-ViTs
on the VP-SDE included. The pages and notebooks, the discrete schedule's U-ViT and its sampler, latents, FID and
digits-FD, cluster submission, the UMAP embedding and Hugging Face models each come with an extra (``pip install
"residual-lab[ui]"``, ``[diffusion]``, ``[cluster]``, ``[embed]``, ``[hf]``, or ``[all]``): a command that needs one
that is not installed says which to install, never a traceback. A training is checked before its run folder is made
(:func:`lab.train.requires.require_extras`).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from types import ModuleType

EXTRAS: dict[str, str] = {
    "panel": "ui", "holoviews": "ui", "pyviz_comms": "ui", "param": "ui", "jupyterlab": "ui", "IPython": "ui",
    "diffusers": "diffusion", "torchmetrics": "diffusion", "torch_fidelity": "diffusion",
    "submitit": "cluster",
    "umap": "embed",
    "transformers": "hf",
}
"""Top-level module → the extra that installs it."""
NAMES = tuple(dict.fromkeys(EXTRAS.values()))
"""The extras, as ``pip install "residual-lab[NAME]"`` names them."""


def install_line(extras: Iterable[str]) -> str:
    """The command that installs ``extras``: ``pip install "residual-lab[diffusion]" (or "residual-lab[all]")``."""
    return f'pip install "residual-lab[{",".join(extras)}]" (or "residual-lab[all]")'


def needs_words(extras: Iterable[str]) -> str:
    """``needs the [diffusion] extra: pip install …``: what a claim or a command that cannot run says."""
    extras = list(extras)
    names = " and ".join(f"[{e}]" for e in extras)
    return f"needs the {names} extra{'s' if len(extras) > 1 else ''}: {install_line(extras)}"


class MissingExtra(ImportError):
    """An extra that is not installed; the message names it and how to install it.

    Attributes:
        extras: the extras missing, by name (:data:`NAMES`).
    """

    def __init__(self, message: str, extras: tuple[str, ...]) -> None:
        super().__init__(message)
        self.extras = extras


def _found(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (diffusers takes seconds)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder refusing it; a module in sys.modules without a spec
        return False


def installed(extra: str) -> bool:
    """Whether every module ``extra`` installs (:data:`EXTRAS`) can be imported.

    Raises:
        ValueError: ``extra`` is not one of :data:`NAMES`.
    """
    if extra not in NAMES:
        raise ValueError(f"unknown extra {extra!r}; the lab's extras: {', '.join(NAMES)}")
    return all(_found(module) for module, e in EXTRAS.items() if e == extra)


def missing_extra(err: ImportError) -> MissingExtra | None:
    """The :class:`MissingExtra` that ``err`` is when it says a module of an extra is not installed (None when it
    does not)."""
    if isinstance(err, MissingExtra):
        return err
    if not isinstance(err, ModuleNotFoundError):
        return None
    top = (err.name or "").split(".")[0]
    if top not in EXTRAS:
        return None
    extra = EXTRAS[top]
    return MissingExtra(f"this needs {top}, which comes with the lab's {extra!r} extra: {install_line([extra])}",
                        (extra,))


def require(module: str) -> ModuleType:
    """``module``, imported.

    Raises:
        MissingExtra: it (or a module of an extra it imports) is not installed; the message names the extra.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        missing = missing_extra(err)
        if missing is None:
            raise
        raise missing from None
