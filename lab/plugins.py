"""Models and snapshot kinds from outside ``lab/``: plugins, loaded in every process the lab starts.

A researcher's own model lives in their own package, not in ``lab/``. The lab imports it wherever it builds
models: an installed package that declares an entry point in group :data:`MODELS` (``residual_lab.models``),
:data:`KINDS` (``residual_lab.kinds``: snapshot kinds, their records and builders) or :data:`VIEWS`
(``residual_lab.views``: their views), and any module named in ``$LAB_PLUGINS`` (comma-separated, importable from
the process's path, never the current folder's). Entry points are read only from the distributions on ``sys.path``
outside the current folder: ``python -m lab`` puts the folder it is started in on the path, and a ``.dist-info``
planted in a run, data or reproduction folder must not run its code there (:func:`installed_entry_points`). The
groups are loaded by the registries themselves: :mod:`lab.nn` loads the models' group at the end of its import,
:mod:`lab.snapshots.kinds` the kinds' (below the pages: a training child builds them without Panel),
:mod:`lab.ui.views.replays` the views', so a page's child process (its fork server imports the lab afresh), every
``torchrun`` rank and a SLURM job know the same models and kinds as the process that started them.
``pyproject.toml`` of such a package::

    [project.entry-points."residual_lab.models"]
    gated = "my_lab_models.gated"      # a module whose @register_model builders register on import
    [project.entry-points."residual_lab.kinds"]
    norms = "my_lab_models.norms"      # lab.snapshots.kinds.register(Kind(...)) with its builder
    [project.entry-points."residual_lab.views"]
    norms = "my_lab_models.norms_view" # lab.ui.views.replays.register("norms", View, live_on=("Playground",))

A plugin that fails to import is named with its error, and the lab goes on without it.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from importlib.metadata import EntryPoint, distributions
from pathlib import Path

log = logging.getLogger(__name__)

MODELS = "residual_lab.models"
"""Entry-point group of modules that register models (``@register_model``)."""
KINDS = "residual_lab.kinds"
"""Entry-point group of modules that register snapshot kinds (``lab.snapshots.kinds.register(Kind(...))``)."""
VIEWS = "residual_lab.views"
"""Entry-point group of modules that register a kind's view (``lab.ui.views.replays.register(kind, View)``)."""
ENV = "LAB_PLUGINS"
"""The environment variable naming plugin modules (comma-separated), loaded with the models' group."""

_loaded: dict[str, list[str]] = {}
FAILED: dict[str, str] = {}
"""Plugin → why it could not be loaded (each logged once, as a warning)."""


def load(group: str) -> list[str]:
    """Import the plugin modules of entry-point ``group`` (with :data:`MODELS`, also those named in ``$LAB_PLUGINS``),
    once per process; returns the modules imported."""
    if group in _loaded:
        return _loaded[group]
    _loaded[group] = names = []
    targets = [(ep.name, ep.value.split(":")[0]) for ep in installed_entry_points(group)]
    if group == MODELS:
        targets += [(name, name) for name in (n.strip() for n in os.environ.get(ENV, "").split(",")) if name]
    for name, module in targets:
        try:
            importlib.import_module(module)
        except Exception as err:  # a broken plugin is named; the lab works without it
            FAILED[name] = f"{module}: {type(err).__name__}: {err}"
            log.warning("plugin %s (%s) could not be loaded: %s", name, module, err)
            continue
        names.append(module)
    return names


def installed_entry_points(group: str) -> list[EntryPoint]:
    """The entry points of ``group`` declared by the distributions on ``sys.path``, the current folder's excepted
    (``""`` and any entry naming it): :func:`importlib.metadata.entry_points` would scan it too, and under
    ``python -m`` it is the first entry of the path. Each distribution counts once (the first on the path)."""
    here = Path.cwd().resolve()
    path = [p for p in sys.path if p and _resolved(p) != here]
    seen: set[str] = set()
    found = []
    for dist in distributions(path=path):
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        found += [ep for ep in dist.entry_points if ep.group == group]
    return found


def _resolved(entry: str) -> Path | None:
    try:
        return Path(entry).resolve()
    except (OSError, RuntimeError):
        return None
