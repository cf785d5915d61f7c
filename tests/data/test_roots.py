import os

import pytest

from lab.data.roots import MAX_COMPONENTS, MAX_PATH_CHARS, open_data_file, resolve_data_path


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


# A path typed into a page is bounded before any work is done with it, every system error is said as text, and a
# file is opened once, from its data folder down, without following a link.

def test_a_huge_path_or_one_with_nul_is_refused_before_it_is_looked_up(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    for text in ("a/" * 50_000, "x" * 1_000_000):  # 100 kB and 1 MB: resolving them once froze the server
        for look_up in (resolve_data_path, open_data_file):
            with pytest.raises(ValueError, match=f"characters long; the lab takes paths of at most {MAX_PATH_CHARS:,}"):
                look_up(text, [root])
    deep = "/".join(["d"] * (MAX_COMPONENTS + 1))
    with pytest.raises(ValueError, match=f"has {MAX_COMPONENTS + 1} names; .* at most {MAX_COMPONENTS}"):
        resolve_data_path(deep, [root])
    for look_up in (resolve_data_path, open_data_file):
        with pytest.raises(ValueError, match="NUL character"):
            look_up("mnist\x00/../../etc", [root])
    long_name = "n" * 300  # within the bounds, but longer than a file name may be: the system's error, said as text
    with pytest.raises(ValueError, match="longer than the file system allows"):
        open_data_file(long_name, [root])
    with pytest.raises(ValueError, match="cannot be looked up"):
        resolve_data_path(long_name, [root])


def test_a_data_file_is_opened_once_inside_the_folders_and_links_are_not_followed(tmp_path):
    root, outside = tmp_path / "data", tmp_path / "elsewhere"
    (root / "models").mkdir(parents=True)
    outside.mkdir()
    (root / "models" / "w.pt").write_bytes(b"weights")
    (outside / "secret.pt").write_bytes(b"secret")
    for text in ("models/w.pt", str(root / "models" / "w.pt"), " models/w.pt "):
        with open_data_file(text, [tmp_path / "none", root]) as f:  # a relative path is tried in each root in turn
            assert f.read() == b"weights" and f.name == str(root.resolve() / "models" / "w.pt")
    (root / "link.pt").symlink_to(outside / "secret.pt")
    (root / "hop").symlink_to(outside)  # a folder in the middle of the path
    (root / "inner.pt").symlink_to(root / "models" / "w.pt")  # even a link that stays inside is refused
    for text in ("link.pt", "hop/secret.pt", "inner.pt", str(root / "hop" / "secret.pt")):
        with pytest.raises(PermissionError, match="does not follow links inside the server's folders"):
            open_data_file(text, [root])
    for text in ("../elsewhere/secret.pt", "models/../../elsewhere/secret.pt", str(root / ".." / "elsewhere")):
        with pytest.raises(PermissionError, match=r"'\.\.'"):
            open_data_file(text, [root])
    with pytest.raises(PermissionError, match="outside the folders this server reads"):
        open_data_file(str(outside / "secret.pt"), [root])
    os.mkfifo(root / "pipe.pt")  # opening it for reading would wait for a writer
    with pytest.raises(FileNotFoundError, match="not a regular file"):
        open_data_file("pipe.pt", [root])
    for text in ("models", str(root), ""):
        with pytest.raises(FileNotFoundError, match="folder|no file named"):
            open_data_file(text, [root])
    with pytest.raises(FileNotFoundError, match="no file"):
        open_data_file("models/absent.pt", [root])
    with pytest.raises(FileNotFoundError, match="is a file, not a folder"):
        open_data_file("models/w.pt/more", [root])
    with pytest.raises(PermissionError, match="LAB_DATA_DIRS"):
        open_data_file("models/w.pt", [])


def test_a_root_that_is_a_link_is_resolved_once_and_may_be_typed_either_way(tmp_path):
    real = tmp_path / "disk" / "data"
    real.mkdir(parents=True)
    (real / "w.pt").write_bytes(b"weights")
    (tmp_path / "data").symlink_to(real)
    for text in ("w.pt", str(tmp_path / "data" / "w.pt"), str(real / "w.pt")):
        with open_data_file(text, [tmp_path / "data"]) as f:
            assert f.read() == b"weights"


def test_a_file_opened_inside_the_folders_keeps_its_bytes_when_a_link_is_swapped_in(tmp_path):
    root, outside = tmp_path / "data", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    (root / "w.pt").write_bytes(b"checked")
    (outside / "secret.pt").write_bytes(b"secret")
    f = open_data_file("w.pt", [root])
    (root / "swap").symlink_to(outside / "secret.pt")
    os.replace(root / "swap", root / "w.pt")  # the attack: the checked name now leads outside
    with f:
        assert f.read() == b"checked", "what was checked is what is read: nothing is opened by name again"
    with pytest.raises(PermissionError, match="does not follow links"):
        open_data_file("w.pt", [root])
