"""What the lab needs beyond its core, and the message a missing piece gives.

The core (``pip install residual-lab``) trains, resumes, analyses and reproduces from the command line. The pages
and notebooks, the diffusion models' samplers and FID, cluster submission and the UMAP embedding each come with an
extra (``pip install "residual-lab[ui]"``, ``[diffusion]``, ``[cluster]``, ``[embed]``, or ``[all]``): a command
that needs one that is not installed says which to install, never a traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRAS: dict[str, str] = {
    "panel": "ui", "holoviews": "ui", "pyviz_comms": "ui", "param": "ui", "jupyterlab": "ui", "IPython": "ui",
    "diffusers": "diffusion", "torchmetrics": "diffusion", "torch_fidelity": "diffusion",
    "submitit": "cluster",
    "umap": "embed",
}
"""Top-level module → the extra that installs it."""


class MissingExtra(ImportError):
    """A module of an extra that is not installed; the message names the extra and how to install it."""


def missing_extra(err: ImportError) -> MissingExtra | None:
    """The :class:`MissingExtra` that ``err`` is when it says a module of an extra is not installed (None when it
    does not)."""
    if not isinstance(err, ModuleNotFoundError):
        return None
    top = (err.name or "").split(".")[0]
    if top not in EXTRAS:
        return None
    extra = EXTRAS[top]
    return MissingExtra(f"this needs {top}, which comes with the lab's {extra!r} extra: "
                        f"pip install \"residual-lab[{extra}]\" (or \"residual-lab[all]\")")


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
