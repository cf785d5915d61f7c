"""The package works outside the checkout: a wheel built from the sources, installed (not editable) into a fresh
virtual environment, runs ``python -m lab train <packaged config>``, ``python -m lab reproduce --budget smoke`` and
``residual-lab serve`` from an empty folder.

The fresh environment sees the test environment's installed dependencies (a path file), not its packages' path
files, so the editable install of this checkout stays invisible there: ``lab`` can only come from the wheel.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import urllib.request
from pathlib import Path

import pytest

from lab.runfolder import layout

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


HIDDEN = ("panel", "holoviews", "pyviz_comms", "param", "jupyterlab", "IPython", "ipywidgets", "diffusers",
          "torchmetrics", "torch_fidelity", "submitit", "umap", "pynndescent", "transformers", "tokenizers")
"""What only the extras install: a core install (``pip install residual-lab``, no extras) has none of it."""

BLOCKER = """import importlib.abc, sys


class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {hidden!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)


sys.meta_path.insert(0, _NotInstalled())
"""


def _environment(tmp_path_factory, name: str, hidden: tuple[str, ...] = ()) -> tuple[Path, Path, dict[str, str]]:
    """``(python, folder, env)``: a fresh environment's interpreter with the wheel installed, an empty working
    folder, the environment. ``hidden``: top-level modules that environment behaves as not having installed (the
    test environment's packages are shared with it; these are made to fail to import as missing ones do)."""
    tmp = tmp_path_factory.mktemp(name)
    src = tmp / "src"  # built from a copy: the build leaves nothing in the checkout
    src.mkdir()
    for file in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / file, src / file)
    shutil.copytree(ROOT / "lab", src / "lab", ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), str(src)],
                   check=True, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("residual_lab-*.whl")
    venv = tmp / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    ours = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    Path(site, "dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")
    if hidden:
        Path(site, "_not_installed.py").write_text(BLOCKER.format(hidden=set(hidden)))
        Path(site, "zz_not_installed.pth").write_text("import _not_installed\n")  # after dependencies.pth
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps", str(wheel)], check=True, cwd=tmp)
    folder = tmp / "empty"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LAB_RUNS_DIR")}
    return python, folder, env


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    """The wheel with every extra's packages: today's whole lab."""
    return _environment(tmp_path_factory, "install")


@pytest.fixture(scope="module")
def core(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    """The wheel without extras: no Panel, JupyterLab, diffusers, submitit or UMAP."""
    return _environment(tmp_path_factory, "core", HIDDEN)


def _run(installed, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    python, folder, env = installed
    return subprocess.run([str(python), *args], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)


def test_lab_comes_from_the_wheel_with_its_configs(installed):
    python = installed[0]
    out = _run(installed, "-c", "import lab, lab.config as c; print(lab.__file__); print(*c.packaged_configs())")
    assert out.returncode == 0, out.stderr
    where, names = out.stdout.splitlines()
    assert Path(where).is_relative_to(python.parent.parent) and not Path(where).is_relative_to(ROOT)
    assert {"spiral", "spiral_residual_droppath", "mae_vit_b16_in1k", "uvit_tiny_digits"} <= set(names.split())


def test_train_a_packaged_config_by_name(installed):
    out = _run(installed, "-m", "lab", "train", "spiral", "model.depth=2", "model.width=4", "data.n=512",
               "train.epochs=1", "--runs-dir", "runs", "--no-progress")
    assert out.returncode == 0, out.stderr
    assert "completed" in out.stderr
    (run,) = (installed[1] / "runs").iterdir()
    assert (run / layout.CONFIG).is_file() and (run / layout.CHECKPOINTS / "last.pt").is_file()
    missing = _run(installed, "-m", "lab", "train", "no_such_config", "--runs-dir", "runs")
    assert missing.returncode == 2 and "packaged: " in missing.stderr and "spiral" in missing.stderr


def test_reproduce_smoke_from_an_empty_folder(installed):
    out = _run(installed, "-m", "lab", "reproduce", "--budget", "smoke", "--out", "rep", "--no-progress")
    assert out.returncode == 0, out.stderr[-2000:]
    rep = installed[1] / "rep"
    assert {"report.html", "report.md", "claims.json"} <= {p.name for p in rep.iterdir()}
    assert "pipeline only" in (rep / "report.md").read_text()


def test_residual_lab_serve_answers_and_stops_on_sigterm(installed):
    python, folder, env = installed
    proc = subprocess.Popen([str(python.parent / "residual-lab"), "serve", "--port", "0", "--runs-dir", "runs"],
                            cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()  # printed once the server listens
        url = re.search(r"http://127\.0\.0\.1:\d+/apps", line)
        assert url, line
        with urllib.request.urlopen(url.group(0), timeout=120) as page:
            assert page.status == 200 and "<title>Residual Lab</title>" in page.read().decode()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_core_trains_and_reproduces_without_any_extra_and_names_the_extra_a_command_needs(core):
    """``pip install residual-lab`` with no extra: training (the VP-SDE U-ViT included) and the reproduction of every
    paper run from an empty folder and exit 0, a claim that needs an extra a row naming it; the pages, a notebook's
    ``lab.ui`` and cluster submission each say which extra to install, never a traceback."""
    hidden = _run(core, "-c", "import panel")
    assert hidden.returncode != 0 and "No module named 'panel'" in hidden.stderr, "the environment has Panel"
    out = _run(core, "-m", "lab", "train", "spiral", "model.depth=2", "model.width=4", "data.n=512",
               "train.epochs=1", "--runs-dir", "runs", "--no-progress")
    assert out.returncode == 0 and "completed" in out.stderr, out.stderr[-2000:]
    out = _run(core, "-m", "lab", "train", "uvit_tiny_digits", *TINY_UVIT, "--runs-dir", "runs", "--no-progress")
    assert out.returncode == 0 and "completed" in out.stderr, out.stderr[-2000:]
    out = _run(core, "-m", "lab", "reproduce", "--budget", "smoke", "--out", "rep", "--no-progress", timeout=1200)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "pipeline only" in (core[1] / "rep" / "report.md").read_text()
    claims = {c["id"]: c for c in json.loads((core[1] / "rep" / "claims.json").read_text())["claims"]}
    assert len(claims) == 25 and set(claims) == {line.split()[0] for line in out.stdout.splitlines()}
    needs = {key: c["reason"] for key, c in claims.items() if c["verdict"] != "pipeline only"}
    pip = 'needs the [diffusion] extra: pip install "residual-lab[diffusion]" (or "residual-lab[all]")'
    hf = 'needs the [hf] extra: pip install "residual-lab[hf]" (or "residual-lab[all]")'
    transformers = {key for key in claims if key.startswith(("alignment.ra", "alignment.nc")) and
                    key.endswith((".vit", ".gpt2"))}
    assert len(transformers) == 7  # RA in Transformers: transformers' models
    assert needs == {"decayed.diffusion_fid": pip, **dict.fromkeys(transformers, hf)}  # the rest runs in the core
    assert re.search(rf"^decayed\.diffusion_fid +not measurable  {re.escape(pip)}$", out.stdout, re.M), out.stdout
    for args, extra in ((("-m", "lab", "serve", "--port", "0", "--runs-dir", "runs"), "ui"),
                        (("-m", "lab", "submit", "spiral", "--executor", "local", "--runs-dir", "runs"), "cluster")):
        out = _run(core, *args, timeout=120)
        assert out.returncode == 2 and f'pip install "residual-lab[{extra}]"' in out.stderr, out.stderr[-2000:]
        assert "Traceback" not in out.stderr
    out = _run(core, "-c", "import lab.ui")
    assert 'pip install "residual-lab[ui]"' in out.stderr.splitlines()[-1]


TINY_UVIT = ("model.embed_dim=16", "model.depth=2", "model.num_heads=2", "train.max_steps=2", "train.eval_every=2",
             "train.warmup_steps=1", "train.samples=4", "train.sample_steps=2")
"""``configs/uvit_tiny_digits.yaml`` in seconds: two steps, then the held-out loss and a grid of samples."""


@pytest.mark.parametrize("needs", [
    pytest.param(("train.fd_samples=16",), id="digits-FD"),
    pytest.param(("model.schedule=discrete", "train.sampler=dpm_solver"), id="discrete schedule")])
def test_a_training_that_needs_an_extra_is_refused_before_its_run_folder_is_made(core, needs):
    """What the core cannot train (digits-FD during training takes torchmetrics; the discrete schedule and its
    DPM-Solver diffusers) is refused with the pip line and exit status 2 before a run folder is made."""
    runs = core[1] / "refused-runs"
    out = _run(core, "-m", "lab", "train", "uvit_tiny_digits", *TINY_UVIT, *needs, "--runs-dir", str(runs),
               "--no-progress", timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert 'needs the [diffusion] extra: pip install "residual-lab[diffusion]"' in out.stderr
    assert "Traceback" not in out.stderr and not (runs.exists() and any(runs.iterdir()))
