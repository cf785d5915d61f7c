"""Checkpoint I/O: a run's ``checkpoints/<name>.pt`` written and loaded with torch.

Written atomically (serialised once, then a temp file moved into place under each name) and loaded with
``weights_only=True``: a checkpoint holds tensors and plain containers, and a file that holds other objects is
refused rather than unpickled whole (it could run whatever code it carries). Where a checkpoint lies and which ones a
run keeps is the run folder's business (:meth:`~lab.runs.store.Run.checkpoint_path`,
:meth:`~lab.runs.store.Run.saved_checkpoints`); a plain entry of one (its ``step``) is read without torch by
:func:`~lab.runfolder.entries.checkpoint_field`.

A network imported from a weights file (:mod:`lab.reports.imported`) keeps no checkpoint: its ``last`` checkpoint is
that file, read again from the path its run recorded, and only while its bytes are the ones recorded.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from lab.runfolder.layout import Checkpoint
from lab.runfolder.writes import atomic_write_bytes
from lab.runs.store import CheckpointError, Run, RunFolderError


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

    An imported network's ``last`` checkpoint is its weights file (:func:`imported_checkpoint`).

    Raises:
        CheckpointError: missing, behind a symbolic link, truncated or not a checkpoint; names the file. For an
            imported network, its weights file is gone or changed since the import.
    """
    path = run.checkpoint_path(name)
    if not path.is_file() and not path.is_symlink():
        imported = _imported_record(run)
        if imported is not None:
            if name != Checkpoint.LAST:
                raise CheckpointError(f"{run.path.name} is an imported network: its one set of weights is the "
                                      f"checkpoint {Checkpoint.LAST}, not {name}")
            return imported_checkpoint(run, imported, map_location)
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


def _imported_record(run: Run) -> dict[str, Any] | None:
    """The ``imported`` record of an imported network's run that names its weights file; None for any other run."""
    try:
        record = run.config_record().get("imported")
    except RunFolderError:  # no readable config.json: load_checkpoint says the checkpoint is missing
        return None
    return record if isinstance(record, dict) and isinstance(record.get("weights"), str) \
        and isinstance(record.get("sha256"), str) else None


def imported_checkpoint(run: Run, imported: dict[str, Any], map_location: str | torch.device = "cpu"
                        ) -> dict[str, Any]:
    """An imported network's weights as a checkpoint of its run, ``{"model": state dict, "step": 0}``: read from the
    file its run recorded (:func:`~lab.nn.weights.read_recorded`: the same checks as at the import, and the same
    bytes), under the run's model's keys; with ``strict`` false at the import, the tensors the file did not give at
    the model's initialisation (its ``model.seed``), as they were then.

    Raises:
        CheckpointError: the file is gone, changed, or no longer fits the run's model.
    """
    from lab.config import config_of_run  # here: reading a checkpoint's step needs neither config nor model
    from lab.nn.networks import HF_BUILDER, WRAPPED, load_file
    from lab.nn.weights import WeightsError, read_recorded
    from lab.train.build import build_model

    where = f"the weights of the imported network {run.path.name}"
    try:
        weights = read_recorded(imported["weights"], imported["sha256"], imported.get("size"))
    except (FileNotFoundError, WeightsError) as err:
        raise CheckpointError(f"{where}: {err}") from None
    cfg = config_of_run(run)
    if imported.get("strict", True) and cfg.model.name != HF_BUILDER:
        prefix = "model." if cfg.model.name in WRAPPED else ""
        state = {f"{prefix}{key}": value for key, value in weights.state.items()}
    else:  # what the file gives over the model as initialised (a Hugging Face file: read as transformers reads it)
        model = build_model(cfg)
        try:
            load_file(model, cfg.model.name, weights, strict=imported.get("strict", True))
        except WeightsError as err:
            raise CheckpointError(f"{where}: {err}") from None
        state = model.state_dict()
    return {"model": {key: value.to(map_location) for key, value in state.items()}, "step": 0}
