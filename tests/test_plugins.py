"""A model or a snapshot kind from a package outside ``lab/``, installed with an entry point (or, a model, named in
``$LAB_PLUGINS``), is known to every process the lab starts: ``lab train``, a page's child process (whose fork
server imports the lab afresh) and each ``torchrun`` rank; a model appears in the Alignment page's choices of its
family, a kind draws live on the Playground and replays on the Runs page."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lab.runfolder import layout

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent

PLUGIN = '''
"""A researcher's own models, in a package of their own."""

from lab.nn.mlp import ResidualMLP
from lab.nn.registry import register_model, signature_of
from lab.nn.resnets import FCResNet


@register_model(family="residual_mlp", input_shape=(2,))
@signature_of(ResidualMLP)
def my_residual_mlp(**kwargs):
    return ResidualMLP(**kwargs)


@register_model(family="resnet", input_shape=(64,))
@signature_of(FCResNet)
def my_fc_resnet(**kwargs):
    return FCResNet(**kwargs)
'''


NORMS = '''
"""A snapshot kind of one's own: the norm of every weight matrix (below the pages: a child builds it without Panel)."""

import numpy as np

from lab.snapshots.kinds import Kind, register


def weight_norms(model):
    return {"norms": np.array([float(p.detach().norm()) for p in model.parameters() if p.ndim == 2], np.float32)}


register(Kind("weight_norms", "Weight norms per matrix", {"norms": 1}, weight_norms, (2, 0.0)))
'''

NORMS_VIEW = '''
"""Its view, drawn live on the Playground and in the Runs page's replays."""

import panel as pn
from bokeh.models import ColumnDataSource
from bokeh.plotting import figure

from lab.ui.views.replays import register


class WeightNormBars:
    def __init__(self):
        self.source = ColumnDataSource({"layer": [], "norm": []})
        self.figure = figure(title="Weight norms", frame_width=300, frame_height=160)
        self.figure.vbar(x="layer", top="norm", width=0.8, source=self.source)
        self.steps = []

    def panes(self):
        return [pn.pane.Bokeh(self.figure)]

    def show(self, snapshot, step, points):
        self.source.data = {"layer": list(range(len(snapshot["norms"]))), "norm": snapshot["norms"].tolist()}
        self.steps.append(step)


register("weight_norms", WeightNormBars, live_on=("Playground",))
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A folder on the path holding the package ``my_lab_models`` installed as pip would: its module and its
    ``.dist-info`` with the entry point (``[project.entry-points."residual_lab.models"]``)."""
    site = tmp_path_factory.mktemp("site")
    (site / "my_lab_models").mkdir()
    (site / "my_lab_models" / "__init__.py").write_text(PLUGIN)
    (site / "my_lab_models" / "norms.py").write_text(NORMS)
    (site / "my_lab_models" / "norms_view.py").write_text(NORMS_VIEW)
    info = site / "my_lab_models-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-lab-models\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[residual_lab.models]\nmine = my_lab_models\n\n"
                                           "[residual_lab.kinds]\nnorms = my_lab_models.norms\n\n"
                                           "[residual_lab.views]\nnorms = my_lab_models.norms_view\n")
    return site


def _run(args: list[str], cwd: Path, path: Path | None = None, timeout: float = 300,
         **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    environment["PYTHONPATH"] = os.pathsep.join(p for p in (str(path or ""), str(ROOT)) if p)
    return subprocess.run(args, cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout)


TRAIN = [sys.executable, "-m", "lab", "train", "spiral", "model.name=my_residual_mlp", "model.depth=2",
         "model.width=4", "data.n=256", "train.epochs=1", "--no-progress"]


def test_an_installed_model_trains_with_lab_train_and_a_module_named_in_lab_plugins_too(site, tmp_path):
    out = _run([*TRAIN, "--runs-dir", "runs"], tmp_path, site)
    assert out.returncode == 0 and "completed" in out.stderr, out.stderr[-2000:]
    (run,) = (tmp_path / "runs").iterdir()
    assert '"name": "my_residual_mlp"' in (run / layout.CONFIG).read_text()
    unknown = _run([*TRAIN, "--runs-dir", "other"], tmp_path)  # not installed: unknown, by name
    assert unknown.returncode == 2 and "unknown model 'my_residual_mlp'" in unknown.stderr, unknown.stderr[-2000:]
    loose = tmp_path / "loose"  # a module of one's own, no package metadata: named in $LAB_PLUGINS
    loose.mkdir()
    (loose / "my_models.py").write_text(PLUGIN)
    named = _run([*TRAIN, "--runs-dir", "third"], tmp_path, loose, LAB_PLUGINS="my_models")
    assert named.returncode == 0 and "completed" in named.stderr, named.stderr[-2000:]


def test_an_installed_model_trains_in_a_pages_child_process_and_is_offered_by_its_family(site, tmp_path):
    script = textwrap.dedent(f"""
        from lab.config import load_config
        from lab.jobs.child import ChildJob
        from lab.jobs.manager import JobManager
        from lab.ui.pages.alignment import AlignmentPage

        manager = JobManager({str(tmp_path / 'runs')!r}, max_jobs=1, processes=True)
        cfg = load_config("spiral", ["model.name=my_residual_mlp", "model.depth=2", "model.width=4",
                                     "data.n=256", "train.epochs=1"])
        job = manager.start_thread(cfg, disk_every_s=0)
        assert isinstance(job, ChildJob)
        print("state", job.wait(240)["state"])
        print("offered", "my_fc_resnet" in AlignmentPage.param["model_type"].objects)
        manager.shutdown()
    """)
    out = _run([sys.executable, "-c", script], tmp_path, site)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "state completed" in out.stdout and "offered True" in out.stdout, out.stdout + out.stderr[-2000:]


def test_an_installed_model_trains_under_torchrun(site, tmp_path):
    out = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "lab",
                "train", "ra_fc_digits", "model.name=my_fc_resnet", "model.depth=2", "model.width=16",
                "train.epochs=1", "train.threads=1", "--runs-dir", "runs", "--no-progress"], tmp_path, site)
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = (tmp_path / "runs").iterdir()
    assert json.loads((run / layout.STATUS).read_text())["state"] == "completed"


def test_an_installed_kind_draws_live_on_the_playground_from_a_child_and_replays_on_the_runs_page(site, tmp_path):
    script = textwrap.dedent(f"""
        import sys

        from lab.snapshots.kinds import KINDS
        assert "weight_norms" in KINDS and "panel" not in sys.modules, "a kind is known below the pages"
        from lab.jobs.child import ChildJob
        from lab.jobs.manager import JobManager
        from lab.ui.pages.playground import PlaygroundPage
        from lab.ui.views.saved_snapshots import SavedSnapshots
        from tests.jobs.helpers import wait_for
        from tests.ui.driving import poll_until

        manager = JobManager({str(tmp_path / 'runs')!r}, max_jobs=1, processes=True)
        page = PlaygroundPage(manager=manager, depth=3, width=4, n=200)
        view = page.live_views["weight_norms"]
        page.param.trigger("play")
        assert isinstance(page.job, ChildJob)
        assert poll_until(page, lambda: len(view.steps) >= 2 and view.steps[-1] >= 4), view.steps
        job, run = page.job, page.job.run
        job.stop()
        assert wait_for(lambda: not job.is_alive(), timeout=60) and run.snapshot_versions("weight_norms")
        saved = SavedSnapshots()
        saved.open(run)
        saved.kind.value = "weight_norms"
        print("replayed", saved.views["weight_norms"].steps[-1] == run.snapshot_versions("weight_norms")[-1])
        manager.shutdown()
    """)
    out = _run([sys.executable, "-c", script], tmp_path, site)
    assert out.returncode == 0 and "replayed True" in out.stdout, out.stdout + out.stderr[-3000:]


def _plant(folder: Path) -> Path:
    """A ``.dist-info`` declaring a models plugin, and its module, planted in ``folder``: what a hostile run, data or
    reproduction folder would hold. Its code, if it ever ran, leaves a marker file."""
    marker = folder / "ran"
    (folder / "evilmod.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    info = folder / "evilplug-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evilplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[residual_lab.models]\nevil = evilmod\n\n[residual_lab.kinds]\n"
                                           "evil = evilmod\n")
    return marker


def test_no_plugin_is_loaded_from_the_folder_the_lab_is_started_in(site, tmp_path):
    marker = _plant(tmp_path)
    collected = _run([sys.executable, "-m", "lab", "reproduce", "--collect", "."], tmp_path)
    assert "Traceback" not in collected.stderr, collected.stderr[-2000:]
    imported = _run([sys.executable, "-c", "import lab.nn, lab.snapshots.kinds"], tmp_path)  # the path's "" entry
    assert imported.returncode == 0, imported.stderr[-2000:]
    assert not marker.exists()
    loaded = "from lab import plugins; import lab.nn; print(plugins.load(plugins.MODELS))"
    installed = _run([sys.executable, "-c", loaded], tmp_path, site)  # one installed on the path still loads
    assert installed.returncode == 0 and "my_lab_models" in installed.stdout, installed.stderr[-2000:]
    assert not marker.exists()
