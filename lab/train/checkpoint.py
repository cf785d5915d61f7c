"""Checkpoint I/O: a run's ``checkpoints/<name>.pt`` written and loaded with torch.

Written atomically (serialised once, then a temp file moved into place under each name) and loaded with
``weights_only=True``: a checkpoint holds tensors and plain containers, and a file that holds other objects is
refused rather than unpickled whole (it could run whatever code it carries). Where a checkpoint lies and which ones a
run keeps is the run folder's business (:meth:`~lab.runs.store.Run.checkpoint_path`,
:meth:`~lab.runs.store.Run.saved_checkpoints`); a plain entry of one (its ``step``) is read without torch by
:func:`~lab.runfolder.entries.checkpoint_field`.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from lab.runfolder.layout import Checkpoint
from lab.runfolder.writes import atomic_write_bytes
from lab.runs.store import CheckpointError, Run


def load_problem(err: Exception) -> str:
    """What was wrong with a file ``torch.load(weights_only=True)`` refused, in one line and without torch's advice
    to load it with ``weights_only=False``: that would run whatever code the file carries."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if "weights_only" in str(err) or "Weights only load failed" in text:
        return "it holds objects other than tensors and plain containers, which are never loaded"
    return text


def save_checkpoint(run: Run, state: dict[str, Any], *names: str) -> Path:
    """Serialise ``state`` (tensors, numbers, strings, containers) once and write it atomically under each name of
    ``run``'s checkpoints (default ``last``).

    Returns:
        The path of the first name.
    """
    buffer = io.BytesIO()
    torch.save(state, buffer)
    paths = [run.checkpoint_path(n) for n in (names or (Checkpoint.LAST,))]
    for path in paths:
        atomic_write_bytes(path, buffer.getvalue(), durable=True)
    return paths[0]


def load_checkpoint(run: Run, name: str = Checkpoint.LAST, map_location: str | torch.device = "cpu"
                    ) -> dict[str, Any]:
    """The checkpoint ``name`` of ``run``, loaded with ``weights_only=True``.

    Raises:
        CheckpointError: missing, behind a symbolic link, truncated or not a checkpoint; names the file.
    """
    path = run.checkpoint_path(name)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    if path.is_symlink() or path.parent.is_symlink():
        raise CheckpointError(f"checkpoint {path} is behind a symbolic link: not followed")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises several types for corrupt files
        raise CheckpointError(f"checkpoint {path} is corrupt or not a lab checkpoint ({load_problem(err)})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {path} does not hold a state dict")
    return state
