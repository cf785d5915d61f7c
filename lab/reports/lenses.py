"""The three papers' lenses on one network, from a notebook: ``lab.analyze(...)``.

The same analyses ``lab analyze`` and ``lab probe`` run, on a run the lab trained or on a network of your own with its
weights file (imported as a run folder first, :mod:`lab.reports.imported`), returning the arrays the pages draw::

    result = lab.analyze("timm:resnet18", weights="resnet18.safetensors", data="cifar10=/data/cifar")
    views = AlignmentViews(); views.show(result.alignment)      # the Alignment page's figures
    result.summary["align_offdiag"], result.retransformation["backtrack"]

Everything is written into the run's ``analysis/`` folder as the command line writes it, so the Runs page lists the
network and its numbers, and a notebook's result and a terminal's are the same files. A call does what the command
does, on as many torch threads (:func:`command_threads`), whatever an earlier call in the same process left:
``lab train`` run in a notebook leaves torch on the one thread a toy model trains fastest on, where the command
takes every core. The caller's setting is restored afterwards.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from lab.nn.hf import HF_PREFIX
from lab.nn.registry import list_models
from lab.reports.alignment import alignment_report
from lab.reports.imported import data_settings, import_weights
from lab.reports.layer_rank import layer_rank_report
from lab.reports.probe import probe_report
from lab.reports.retransformation import retransformation_report
from lab.runfolder import layout
from lab.runfolder.layout import Checkpoint
from lab.runs.store import CheckpointError, Run, RunStore, default_runs_dir
from lab.train.core import machine_cores
from lab.train.resume import find_run

__all__ = ["ANALYSES", "Analysis", "analyze", "command_threads"]

ANALYSES = ("alignment", "retransformation", "rank", "probe")
"""What :func:`analyze` can run; the first three by default (the probe trains a linear head)."""


@dataclass(frozen=True)
class Analysis:
    """What :func:`analyze` measured on one network.

    Attributes:
        run: the run folder the results were written to (the imported run for a weights file).
        network: the network analysed from a weights file (``timm:resnet18`` …), or None for a run.
        summary: ``analysis/alignment.json`` (RA1–RA4 scalars, 1/σ₁ and NC by layer), or None.
        alignment: ``analysis/alignment.npz``'s arrays — what :meth:`lab.ui.views.live_alignment.AlignmentViews.show`
            draws (RA mosaic, trajectories, spectra, RA4 fit, NC) — or None.
        retransformation: ``analysis/retransformation.json`` (distance to the input and to the previous step,
            CKA between layers), or None.
        rank: ``analysis/layer_rank.json`` (Eq. 6 rank, effective rank and a ridge probe's accuracy by layer), or
            None.
        probe: ``analysis/probe.json`` (linear probe accuracy and feature rank), or None.
    """

    run: Run
    network: str | None = None
    summary: dict[str, Any] | None = None
    alignment: dict[str, np.ndarray] | None = field(default=None, repr=False)
    retransformation: dict[str, Any] | None = None
    rank: dict[str, Any] | None = None
    probe: dict[str, Any] | None = None


def analyze(source: str | Path | Run, *, weights: str | Path | BinaryIO | None = None, data: str = "digits",
            settings: Sequence[str] = (), analyses: Sequence[str] = ANALYSES[:3], inputs: int = 64,
            k: int | None = None, nc_inputs: int = 500, checkpoint: str = Checkpoint.LAST, strict: bool = True,
            device: str = "cpu", runs_dir: str | Path | None = None, probe: dict[str, Any] | None = None,
            progress: bool | Callable[[int, int], None] = False, blocks: str | None = None,
            threads: int | None = None) -> Analysis:
    """Residual Alignment, re-transformation, rank by layer and (on request) the linear probe of a run or of a network
    of your own.

    Args:
        source: a run (its id in ``runs_dir``, its folder, or a :class:`Run`), or a network with ``weights``:
            ``timm:<arch>``, ``torchvision:<arch>`` or a registered lab model; or a Hugging Face ``save_pretrained``
            folder, ``hf:DIR``, whose weights are its own (a language model with ``data="text=FILE"``).
        weights: the network's weights file (``.safetensors`` or a PyTorch file of tensors): its path, or the file
            already open in binary mode (read once from it, never reopened by name); only with a network.
        data: the data it is analysed on, ``NAME`` or ``NAME=FOLDER`` (as ``--data``; digits ships with the lab).
        settings: further config settings ``KEY=VALUE`` (as ``--set``: ``data.image_size=32``,
            ``model.num_classes=10``; for a network of your own ``data.normalize=model|data|none``, how its inputs
            are normalised, :mod:`lab.reports.imported`).
        analyses: which of :data:`ANALYSES` to run.
        inputs: test inputs of the alignment and re-transformation analyses; training and test inputs each of
            the rank analysis.
        k: singular triplets per block (default: the paper's 30, capped at the Jacobians' size).
        nc_inputs: training inputs for neural collapse.
        checkpoint: which checkpoint of a run (``last`` or ``best``).
        device: where the alignment's Jacobians (and the probe) run: ``cpu``, ``cuda[:i]`` or ``auto``.
        blocks: the residual blocks of a library network the lab has no adapter for, by module-name pattern
            (``stages.*.blocks.*``; :mod:`lab.nn.named_blocks`).
        strict: refuse a weights file whose keys do not fit the network (else load what fits and name the rest).
        runs_dir: where runs are (and an imported network's run is written; default ``$LAB_RUNS_DIR`` or ``./runs``).
        progress: a progress bar of the alignment's Jacobians, or ``progress(done, total)`` to feed one.
        probe: keyword arguments of :func:`~lab.reports.probe.probe_report` (``layer``, ``epochs``, ``protocol`` …).
        threads: torch's CPU threads while the analyses run (None: as many as ``python -m lab analyze`` takes,
            ``$OMP_NUM_THREADS`` or this process's cores); the caller's setting is restored afterwards.

    Returns:
        An :class:`Analysis`, whose values are the files the analyses wrote.

    Raises:
        ValueError: an unknown analysis or a count out of range, a weights file without a network (or a network
            without one), a bad setting, a file with pickled objects or keys that do not fit; FileNotFoundError: no
            such file, run or data folder; CheckpointError: a run's checkpoint that cannot be read. A network of
            your own whose analysis is refused leaves no run folder.
    """
    unknown = set(analyses) - set(ANALYSES)
    if unknown:
        raise ValueError(f"unknown analyses {sorted(unknown)}; known: {', '.join(ANALYSES)}")
    if inputs < 2 or (k is not None and k < 1) or nc_inputs < 2 or (threads is not None and threads < 1):
        raise ValueError(f"inputs and nc_inputs must be >= 2, k and threads >= 1; got inputs={inputs}, k={k}, "
                         f"nc_inputs={nc_inputs}, threads={threads}")
    store = RunStore(Path(runs_dir) if runs_dir is not None else default_runs_dir())
    with _torch_threads(threads or command_threads()):
        network = None
        if weights is not None or str(source).startswith(HF_PREFIX):
            if isinstance(source, Run):
                raise ValueError("weights= goes with a network (timm:<arch>, torchvision:<arch> or a lab model), not "
                                 "a run")
            network = str(source)
            run, _ = import_weights(store, network, weights, data_settings(data, settings), strict=strict,
                                    blocks=blocks)
        elif isinstance(source, Run):
            run = source
        elif ":" in str(source) or str(source) in list_models():
            raise ValueError(f"{source!r} is a network: give its weights file as weights= (the lab downloads nothing)")
        else:
            run = find_run(str(source), store)
        try:
            return _measured(run, network, analyses, inputs=inputs, k=k, nc_inputs=nc_inputs, checkpoint=checkpoint,
                             device=device, probe=probe, progress=progress)
        except (ValueError, CheckpointError, FileNotFoundError):  # a refusal: the import made for it goes too
            if network is not None:
                shutil.rmtree(run.path, ignore_errors=True)
            raise


def command_threads() -> int:
    """The torch threads ``python -m lab analyze`` runs on: ``$OMP_NUM_THREADS`` when it is set (torch starts with
    it), else this process's cores."""
    with contextlib.suppress(ValueError):
        if int(os.environ.get("OMP_NUM_THREADS", "")) >= 1:
            return int(os.environ["OMP_NUM_THREADS"])
    return machine_cores()


@contextlib.contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _measured(run: Run, network: str | None, analyses: Sequence[str], *, inputs: int, k: int | None,
              nc_inputs: int, checkpoint: str, device: str, probe: dict[str, Any] | None,
              progress: bool | Callable[[int, int], None]) -> Analysis:
    """The analyses ``analyses`` of ``run``, each written into its ``analysis/`` folder."""
    results: dict[str, Any] = {"network": network}
    if "alignment" in analyses:
        results["summary"] = alignment_report(run, inputs=inputs, k=k, nc_inputs=nc_inputs, checkpoint=checkpoint,
                                              device=device, progress=progress)
        with np.load(run.analysis_path(layout.ALIGNMENT_ARRAYS)) as arrays:
            results["alignment"] = {key: arrays[key] for key in arrays.files}
    if "retransformation" in analyses:
        results["retransformation"] = retransformation_report(run, inputs=inputs, checkpoint=checkpoint)
    if "rank" in analyses:
        results["rank"] = layer_rank_report(run, points=inputs, checkpoint=checkpoint)
    if "probe" in analyses:
        results["probe"] = probe_report(run, checkpoint=checkpoint, **{"progress": False, "device": device,
                                                                       **(probe or {})})
    return Analysis(run, **results)
