"""The import graph of ``lab`` points only downward: a package imports its own modules and lower layers, never a
higher one (docs/ARCHITECTURE.md, "Layers"). Imports inside functions count as much as top-level ones."""

from __future__ import annotations

import ast
from pathlib import Path

import lab

# Lowest first; a package may import from its own layer's other packages only where the pair is listed below.
LAYERS: list[set[str]] = [
    {"runfolder"},  # the run-folder format: no other lab package, no torch (tests/runfolder/test_import_cost.py)
    {"shortcuts", "hooks", "seeds", "viz", "strict", "extras", "plugins"},
    {"nn", "data"},
    {"runs"},  # reading and writing run folders: no torch, no model (tests/runfolder/test_import_cost.py)
    {"config"},
    {"analysis"},
    {"train"},
    {"snapshots"},  # the type, kinds, builders, cadence, publisher and shadow; the views that draw them are the UI's
    {"reports", "sweeps"},
    {"jobs"},
    {"reproduce"},
    {"cli", "ui", "__main__"},
]
RANK = {package: rank for rank, layer in enumerate(LAYERS) for package in layer}
SAME_LAYER_ALLOWED = {("cli", "__main__"), ("__main__", "cli"), ("cli", "ui")}  # `serve` starts the pages


def _top(module: str) -> str | None:
    """``lab.runs.store`` -> ``runs``; None for anything outside ``lab``."""
    parts = module.split(".")
    return parts[1] if parts[0] == "lab" and len(parts) > 1 else None


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module == "lab":
                found.update(f"lab.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def upward_imports(root: Path) -> list[str]:
    problems = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.name == "__init__.py" and len(rel.parts) == 1:
            continue  # lab/__init__.py: the package itself
        source = rel.parts[0].removesuffix(".py")
        for module in _imports(path):
            target = _top(module)
            if target is None or target == source:
                continue
            if target not in RANK or source not in RANK:
                problems.append(f"{rel}: {module} (package not placed in a layer)")
            elif RANK[target] > RANK[source] or (RANK[target] == RANK[source]
                                                 and (source, target) not in SAME_LAYER_ALLOWED):
                problems.append(f"lab/{rel} imports {module}: {target} is not below {source}")
    return problems


def test_every_package_is_placed_in_a_layer() -> None:
    root = Path(lab.__file__).parent
    packages = {p.name.removesuffix(".py") for p in root.iterdir()
                if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.name != "__init__.py")}
    assert packages - set(RANK) == set()


def test_imports_point_only_downward() -> None:
    assert upward_imports(Path(lab.__file__).parent) == []


def test_the_check_finds_an_upward_import_even_inside_a_function(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "x.py").write_text("from lab.runfolder.layout import RunState\n\n\n"
                                            "def f():\n    from lab.jobs.manager import JobManager\n")
    assert upward_imports(tmp_path) == ["lab/runs/x.py imports lab.jobs.manager: jobs is not below runs"]
