"""A model from a package outside ``lab/``, installed with an entry point (or named in ``$LAB_PLUGINS``), is known
to every process the lab starts: ``lab train``, a page's child process (whose fork server imports the lab afresh)
and each ``torchrun`` rank; it appears in the Alignment page's choices of its family."""

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


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A folder on the path holding the package ``my_lab_models`` installed as pip would: its module and its
    ``.dist-info`` with the entry point (``[project.entry-points."residual_lab.models"]``)."""
    site = tmp_path_factory.mktemp("site")
    (site / "my_lab_models").mkdir()
    (site / "my_lab_models" / "__init__.py").write_text(PLUGIN)
    info = site / "my_lab_models-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-lab-models\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[residual_lab.models]\nmine = my_lab_models\n")
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
