"""Every notebook in notebooks/ is committed clean and runs end to end in smoke mode (LAB_SMOKE=1).

The kernel is the interpreter running the tests: a ``python3`` kernelspec whose argv starts with
``sys.executable`` is written into a private folder put first on JUPYTER_PATH, so neither a user's nor a
system's kernels are used and nothing is registered globally. Runtime files and the IPython profile also go to
temporary folders, so the test works on a fresh machine with a read-only home.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
import pytest

from tests.waiting import scaled

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 180
"""Seconds a cell may take on an idle machine (scaled by the load, :func:`tests.waiting.scaled`); a smoke run of a whole
notebook takes well under a minute."""
KERNEL = "python3"


def test_notebooks_exist():
    assert NOTEBOOKS, f"no notebooks in {ROOT / 'notebooks'}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_clean(path: Path):
    """Valid nbformat 4; no outputs, execution counts, timing or widget state; the plain python3 kernel."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: cells {dirty} have outputs or execution counts; strip them before committing"
    timed = [i for i, c in enumerate(nb.cells) if "execution" in c.metadata]
    assert not timed, f"{path.name}: cells {timed} carry execution timing metadata"
    assert nb.metadata.get("kernelspec", {}).get("name") == KERNEL
    assert "widgets" not in nb.metadata, f"{path.name}: saved widget state in the notebook metadata"


@pytest.fixture(scope="session")
def kernel_env(tmp_path_factory) -> dict[str, str]:
    """Environment that makes ``python3`` resolve to a kernel running this interpreter."""
    from ipykernel.kernelspec import install
    from jupyter_client.kernelspec import KernelSpecManager

    base = tmp_path_factory.mktemp("jupyter")
    install(prefix=str(base), kernel_name=KERNEL)
    env = {"JUPYTER_PATH": str(base / "share" / "jupyter"), "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
           "IPYTHONDIR": str(base / "ipython")}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        spec = KernelSpecManager().get_kernel_spec(KERNEL)
    assert spec.argv[0] == sys.executable, f"kernel {KERNEL} resolves to {spec.argv}, not {sys.executable}"
    return env


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_runs_in_smoke_mode(path: Path, kernel_env: dict[str, str], tmp_path, monkeypatch):
    """Execute every cell with the repo root as working directory; any error fails the test."""
    from nbclient import NotebookClient

    for key, value in kernel_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("LAB_SMOKE", "1")
    monkeypatch.setenv("LAB_RUNS_DIR", str(tmp_path / "runs"))  # any run a notebook stores stays out of the tree
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=round(scaled(CELL_TIMEOUT_S)), kernel_name=KERNEL, allow_errors=False,
                            resources={"metadata": {"path": str(ROOT)}})
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError (with the cell and its traceback) on the first error
    elapsed = time.perf_counter() - start
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    shown = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
             if o.output_type in ("display_data", "execute_result") and o.get("data")]
    assert shown, f"{path.name} displayed nothing"
    print(f"{path.name}: smoke run in {elapsed:.1f} s")
