"""A page's "checkpoint" source: a network of your own, from a weights file on the server, analysed in the background.

The form takes a network (``timm:<arch>``, ``torchvision:<arch>`` or a registered lab model), a weights file, the
data it is analysed on and any further settings, as ``lab analyze --model NAME --weights FILE`` takes them. The file
and the data folder resolve only inside the folders the server was started with (its runs folders and
``LAB_DATA_DIRS``): a path typed into a page never reads anywhere else on disk. **Analyse** runs
:func:`lab.reports.lenses.analyze` in the background, one analysis at a time per server (a second is refused while
one runs, never queued), which writes an imported run folder (the Runs page lists it) and hands the page its
:class:`~lab.reports.lenses.Analysis` on the session's thread; meanwhile a status line and a progress bar follow the
Jacobians done. Everything typed and every error is shown as text.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import panel as pn
import param

from lab.data.images import IMAGE_DATASETS
from lab.data.roots import data_roots, resolve_data_file, resolve_data_path
from lab.reports.lenses import Analysis, analyze
from lab.runs.catalog import run_roots
from lab.ui.follower import can_schedule, weak_periodic
from lab.ui.text import alert_pane, code, markdown_pane, md

__all__ = ["CheckpointSource"]

_ANALYSES = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lab-checkpoint")
_SLOT = threading.BoundedSemaphore(1)  # one analysis at a time per server, none queued behind it
TICK_MS = 300
"""How often a served page looks at the running analysis's progress."""


class CheckpointSource(pn.viewable.Viewer):
    """The form, its status and progress, and the analysis it runs.

    Args:
        runs_dir: where the imported run folder is written (the server's runs folder).
        roots: the folders a typed path may resolve in (default: the server's run folders and ``LAB_DATA_DIRS``).
        on_result: called with the :class:`~lab.reports.lenses.Analysis` on the session's thread.
        analyses: what :func:`~lab.reports.lenses.analyze` runs.
    """

    network = param.String(default="", doc="timm:<arch>, torchvision:<arch> or a registered lab model")
    weights = param.String(default="", doc="its weights file (.safetensors or a PyTorch file of tensors), inside "
                                           "the server's folders")
    blocks = param.String(default="", doc="for a network the lab has no adapter for: its residual blocks by module "
                                          "name (stages.*.blocks.*), each computing h + F(h)")
    dataset = param.Selector(default="digits", objects=list(IMAGE_DATASETS), doc="the data it is analysed on")
    data_folder = param.String(default="", doc="that data set's folder, inside the server's data folders")
    settings = param.String(default="", doc="further settings KEY=VALUE, separated by spaces (data.image_size=32 "
                                            "model.num_classes=10)")
    inputs = param.Integer(default=16, bounds=(2, 512), doc="test inputs analysed")
    k = param.Integer(default=10, bounds=(1, 64), doc="singular triplets per block (capped at the blocks' size)")
    analyse = param.Event(label="Analyse")

    def __init__(self, runs_dir: Path, roots: Sequence[Path] | None = None,
                 on_result: Callable[[Analysis], None] | None = None,
                 analyses: Sequence[str] = ("alignment",), **params: Any) -> None:
        super().__init__(**params)
        self.runs_dir = Path(runs_dir)
        self.roots = list(roots) if roots is not None else [*run_roots(self.runs_dir), *data_roots()]
        self.on_result = on_result
        self.analyses = tuple(analyses)
        self.result: Analysis | None = None
        self._future: Future | None = None
        self._done = (0, 0)  # Jacobians done, total: written by the analysis's thread
        self._lock = threading.Lock()
        self._ticker = None
        self.status = markdown_pane("Analyse a network of your own from its weights file.", margin=(0, 10))
        self.bar = pn.indicators.Progress(value=0, max=100, visible=False, sizing_mode="stretch_width", height=12,
                                          margin=(0, 10))
        self.alert = alert_pane("", alert_type="danger", visible=False, margin=(5, 10))
        widgets = {"network": {"placeholder": "timm:resnet18"}, "weights": {"placeholder": "resnet18.safetensors"},
                   "blocks": {"placeholder": "(found for ResNets and ViTs)"},
                   "data_folder": {"placeholder": "cifar10"}, "settings": {"placeholder": "data.image_size=32"},
                   "analyse": {"color": "primary"}}
        fields = ["network", "weights", "blocks", "dataset", "data_folder", "settings", "inputs", "k", "analyse"]
        self.form = pn.Param(self.param, parameters=fields, widgets=widgets, show_name=False, width=300)
        self._layout = pn.Column(self.form, self.status, self.bar, self.alert, width=330)

    @property
    def busy(self) -> bool:
        """Whether this form's analysis is running."""
        return self._future is not None and not self._future.done()

    @param.depends("analyse", watch=True)
    def start(self) -> bool:
        """Check the form and start the analysis; a refused form says why (as text) and starts nothing."""
        if self.busy:
            return False
        self.alert.visible = False
        try:
            if not self.network.strip():
                raise ValueError("name the network (timm:<arch>, torchvision:<arch> or a registered lab model)")
            weights = resolve_data_file(self.weights, self.roots)
            data = self.dataset
            if self.data_folder.strip():
                data = f"{data}={resolve_data_path(self.data_folder)}"
            settings = self.settings.split()
            if any(item.partition("=")[0].strip() == "data.root" for item in settings):
                raise PermissionError("the data folder goes in its own field, which reads only inside the server's "
                                      "data folders, not in the settings")
        except (ValueError, PermissionError, FileNotFoundError) as err:
            self._error(f"Cannot analyse: {err}")
            return False
        network = self.network.strip()
        if not _SLOT.acquire(blocking=False):
            self._error("Another checkpoint is being analysed on this server: try again when it has finished.")
            return False
        self._done = (0, 0)
        self.bar.value, self.bar.visible = 0, True
        self.status.object = f"Analysing {code(network)} from {code(weights.name)} …"

        def progress(done: int, total: int) -> None:
            with self._lock:
                self._done = (done, total)

        kwargs = {"weights": weights, "data": data, "settings": settings, "analyses": self.analyses,
                  "inputs": self.inputs, "k": self.k, "runs_dir": self.runs_dir, "progress": progress,
                  "blocks": self.blocks.strip() or None}  # the form as it was when Analyse was pressed

        def run() -> Analysis:
            try:
                return analyze(network, **kwargs)
            finally:
                _SLOT.release()

        self._future = _ANALYSES.submit(run)
        if can_schedule() and self._ticker is None:
            self._ticker = weak_periodic(self, CheckpointSource.poll, TICK_MS, CheckpointSource._poll_failed)
        return True

    def poll(self) -> bool:
        """Show the progress; once the analysis has ended, its result or its error (a served page's periodic callback
        calls this; a notebook or a test may too). Returns whether a result was drawn."""
        future = self._future
        if future is None:
            return False
        with self._lock:
            done, total = self._done
        if not future.done():
            if total:
                self.bar.value = int(100 * done / total)
                self.status.object = f"Analysing: {md(done)} of {md(total)} Jacobians …"
            return False
        self._future = None
        self.bar.visible = False
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        if future.exception() is not None:
            self._error(f"The analysis failed: {future.exception()}")
            return False
        self.result = future.result()
        self.status.object = f"Analysed {code(self.result.network)}: run {code(self.result.run.path.name)}"
        if self.on_result is not None:
            self.on_result(self.result)
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the running analysis ends, then :meth:`poll` (a notebook or a test)."""
        future = self._future
        if future is not None:
            future.exception(timeout=timeout)
        return self.poll()

    def _error(self, text: str) -> None:
        self.alert.object, self.alert.visible = md(text), True
        self.status.object = "Nothing analysed."

    def _poll_failed(self, err: Exception) -> None:
        self._error(f"The page could not show the analysis: {err}")

    def card(self) -> pn.Card:
        """The form as a page's sidebar shows it: a card, "Analyse a checkpoint", closed until opened."""
        return pn.Card(self._layout, title="Analyse a checkpoint", collapsed=True, sizing_mode="stretch_width")

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout
