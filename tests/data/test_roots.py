import pytest

from lab.data.roots import resolve_data_path


def test_paths_resolve_only_inside_the_data_folders(tmp_path, monkeypatch):
    root, outside = tmp_path / "data", tmp_path / "elsewhere"
    (root / "mnist").mkdir(parents=True)
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    assert resolve_data_path("mnist", [root]) == (root / "mnist").resolve()
    assert resolve_data_path(str(root / "mnist"), [root]) == (root / "mnist").resolve()
    for text in ("../elsewhere", str(outside), "/etc", "escape"):
        with pytest.raises(PermissionError, match="outside the data folders"):
            resolve_data_path(text, [root])
    with pytest.raises(FileNotFoundError, match="no folder 'cifar'"):
        resolve_data_path("cifar", [root])
    monkeypatch.delenv("LAB_DATA_DIRS", raising=False)
    with pytest.raises(PermissionError, match="LAB_DATA_DIRS"):
        resolve_data_path("mnist")
    monkeypatch.setenv("LAB_DATA_DIRS", f"{outside}:{root}")
    assert resolve_data_path("mnist") == (root / "mnist").resolve()
