"""A page's "checkpoint" source: a network of your own, from a weights file on the server, analysed in the background.

The form takes a network (``timm:<arch>``, ``torchvision:<arch>``, a registered lab model, or a Hugging Face
``save_pretrained`` folder ``hf:DIR`` whose weights are its own), a weights file, the data it is analysed on (a
language model: a text file, read by its tokenizer) and a short list of settings — the data's image size (at most
:data:`~lab.reports.served.MAX_IMAGE_SIZE`) and samples per class, the analysis's inputs and K — never a model's
construction keys or a path. The weights file and the data folder resolve only inside the folders the server was
started with (its runs folders and ``LAB_DATA_DIRS``): a path typed into a page never reads anywhere else on disk.
**Analyse** runs :func:`lab.reports.served.analyze_served` in a bounded child process
(:class:`~lab.ui.views.task_panel.TaskPanel`: a memory and a time bound, a progress bar and **Cancel**; one analysis
per session, a few per server), which opens the file once without following links, writes an imported run folder
(the Runs page lists it) and hands the page its :class:`~lab.reports.lenses.Analysis` on the session's thread.
Everything typed and every error is shown as text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import panel as pn
import param

from lab.data.images import IMAGE_DATASETS
from lab.data.roots import data_roots, resolve_data_file, resolve_data_path
from lab.data.text import TEXT
from lab.nn.hf import HF_PREFIX
from lab.reports.lenses import Analysis
from lab.reports.served import MAX_IMAGE_SIZE, MAX_PER_CLASS, analyze_served
from lab.runs.catalog import run_roots
from lab.ui.pages.knobs import bounded_text
from lab.ui.text import code, md
from lab.ui.views.task_panel import SessionTasks, TaskPanel

__all__ = ["CheckpointSource"]

BLOCKS_CHARS = 256
"""The longest module-name pattern the form takes for ``blocks``."""


class CheckpointSource(pn.viewable.Viewer):
    """The form, its status and progress, and the analysis it runs.

    Args:
        runs_dir: where the imported run folder is written (the server's runs folder).
        roots: the folders a typed path may resolve in (default: the server's run folders and ``LAB_DATA_DIRS``).
        on_result: called with the :class:`~lab.reports.lenses.Analysis` on the session's thread.
        analyses: what :func:`~lab.reports.lenses.analyze` runs.
        session: the session's analyses (one runs at a time; default: the served session's).
    """

    network = bounded_text(doc="timm:<arch>, torchvision:<arch>, a registered lab model, or hf:DIR (a Hugging Face "
                               "save_pretrained folder inside the server's folders)", chars=200)
    weights = bounded_text(doc="its weights file (.safetensors or a PyTorch file of tensors), inside the server's "
                               "folders (none for hf:DIR: its own)")
    blocks = bounded_text(doc="for a network the lab has no adapter for: its residual blocks by module name "
                              "(stages.*.blocks.*), each computing h + F(h)", chars=BLOCKS_CHARS)
    dataset = param.Selector(default="digits", objects=[*IMAGE_DATASETS, TEXT], doc="the data it is analysed on "
                                                                                   "(text: a language model's)")
    data_folder = bounded_text(doc="that data set's folder (text: its UTF-8 file), inside the server's data folders")
    image_size = param.Integer(default=0, bounds=(0, MAX_IMAGE_SIZE), doc="images resized to N × N (0: the data "
                                                                          "set's own)")
    max_per_class = param.Integer(default=0, bounds=(0, MAX_PER_CLASS), doc="at most N images per class (0: all)")
    inputs = param.Integer(default=16, bounds=(2, 512), doc="test inputs analysed")
    k = param.Integer(default=10, bounds=(1, 64), doc="singular triplets per block (capped at the blocks' size)")
    analyse = param.Event(label="Analyse")

    def __init__(self, runs_dir: Path, roots: Sequence[Path] | None = None,
                 on_result: Callable[[Analysis], None] | None = None,
                 analyses: Sequence[str] = ("alignment",), session: SessionTasks | None = None,
                 **params: Any) -> None:
        super().__init__(**params)
        self.runs_dir = Path(runs_dir)
        self.roots = list(roots) if roots is not None else [*run_roots(self.runs_dir), *data_roots()]
        self.on_result = on_result
        self.analyses = tuple(analyses)
        self.result: Analysis | None = None
        self.task = TaskPanel("Analyse a network of your own from its weights file.", session=session)
        self.status, self.alert = self.task.status, self.task.alert
        widgets = {"network": {"placeholder": "timm:resnet18"}, "weights": {"placeholder": "resnet18.safetensors"},
                   "blocks": {"placeholder": "(found for ResNets and ViTs)"},
                   "data_folder": {"placeholder": "cifar10"},
                   "image_size": pn.widgets.IntInput, "max_per_class": pn.widgets.IntInput,
                   "inputs": pn.widgets.IntInput, "k": pn.widgets.IntInput, "analyse": {"color": "primary"}}
        fields = ["network", "weights", "blocks", "dataset", "data_folder", "image_size", "max_per_class", "inputs",
                  "k", "analyse"]
        self.form = pn.Param(self.param, parameters=fields, widgets=widgets, show_name=False, width=300)
        self._layout = pn.Column(self.form, self.task, width=330)

    @property
    def busy(self) -> bool:
        """Whether this form's analysis is running."""
        return self.task.busy

    @param.depends("analyse", watch=True)
    def start(self) -> bool:
        """Check the form and start the analysis; a refused form says why (as text) and starts nothing."""
        if self.busy:
            return False
        network, weights = self.network.strip(), self.weights.strip()
        try:
            if not network:
                raise ValueError("name the network (timm:<arch>, torchvision:<arch>, a registered lab model or "
                                 "hf:DIR)")
            if not weights and not network.startswith(HF_PREFIX):
                raise FileNotFoundError("name its weights file")
            if self.dataset == TEXT and not self.data_folder.strip():
                raise FileNotFoundError("name the text file a language model is analysed on")
            resolve = resolve_data_file if self.dataset == TEXT else resolve_data_path
            data_root = resolve(self.data_folder) if self.data_folder.strip() else None
        except (ValueError, PermissionError, FileNotFoundError) as err:
            self.task.fail(f"Cannot analyse: {md(err)}")
            return False
        source = f" from {code(Path(weights).name)}" if weights else ""
        return self.task.start(
            f"Analysing {code(network)}{source}", analyze_served, network, weights, self.roots, data=self.dataset,
            data_root=data_root, image_size=self.image_size, max_per_class=self.max_per_class, inputs=self.inputs,
            k=self.k, blocks=self.blocks.strip() or None, analyses=self.analyses, runs_dir=self.runs_dir,
            on_result=self._show)

    def _show(self, result: Analysis) -> None:
        self.result = result
        self.status.object = f"Analysed {code(result.network)}: run {code(result.run.path.name)}"
        if self.on_result is not None:
            self.on_result(result)

    def poll(self) -> bool:
        """Show the progress; once the analysis has ended, its result or its error (a served page's periodic callback
        calls this; a notebook or a test may too). Returns whether a result was drawn."""
        return self.task.poll()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the running analysis ends, then :meth:`poll` (a notebook or a test)."""
        return self.task.wait(timeout)

    def card(self) -> pn.Card:
        """The form as a page's sidebar shows it: a card, "Analyse a checkpoint", closed until opened."""
        return pn.Card(self._layout, title="Analyse a checkpoint", collapsed=True, sizing_mode="stretch_width")

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout
