"""The data folders a server may read: a path typed into a page resolves inside them, never anywhere on disk.

The folders are named when the server starts: ``LAB_DATA_DIRS`` (one or more paths, separated by ``os.pathsep``).
A relative path is looked up in each folder in turn; an absolute one must lie inside one of them. Symbolic links
are resolved first, so a link cannot lead outside.
"""

from __future__ import annotations

import os
from pathlib import Path


def data_roots() -> list[Path]:
    """The folders named by ``LAB_DATA_DIRS`` (resolved; empty when it is unset)."""
    raw = os.environ.get("LAB_DATA_DIRS", "")
    return [Path(p).expanduser().resolve() for p in raw.split(os.pathsep) if p.strip()]


def resolve_data_path(text: str, roots: list[Path] | None = None) -> Path:
    """The folder ``text`` names, inside one of ``roots`` (default :func:`data_roots`).

    Raises:
        PermissionError: no data folders are configured, or the path lies outside all of them.
        FileNotFoundError: it lies inside but does not exist.
    """
    roots = data_roots() if roots is None else [Path(r).resolve() for r in roots]
    if not roots:
        raise PermissionError("this server reads no data folders: start it with LAB_DATA_DIRS=/path/to/data "
                              "to use data sets other than digits")
    path = Path(text.strip()).expanduser()
    candidates = [path.resolve()] if path.is_absolute() else [(root / path).resolve() for root in roots]
    inside = [c for c in candidates if any(c == r or r in c.parents for r in roots)]
    if not inside:
        raise PermissionError(f"{text!r} is outside the data folders of this server "
                              f"({', '.join(map(str, roots))})")
    for c in inside:
        if c.is_dir():
            return c
    raise FileNotFoundError(f"no folder {text!r} in the data folders ({', '.join(map(str, roots))})")


def resolve_data_file(text: str, roots: list[Path]) -> Path:
    """The file ``text`` names (a weights file typed into a page), inside one of ``roots``, as
    :func:`resolve_data_path` resolves folders: a relative path is looked up in each root in turn, links are
    resolved first.

    Raises:
        PermissionError: no roots, or the path lies outside all of them.
        FileNotFoundError: it lies inside but is no file.
    """
    roots = [Path(r).resolve() for r in roots]
    where = ", ".join(map(str, roots))
    if not text.strip():
        raise FileNotFoundError("no file named")
    path = Path(text.strip()).expanduser()
    candidates = [path.resolve()] if path.is_absolute() else [(root / path).resolve() for root in roots]
    inside = [c for c in candidates if any(r in c.parents for r in roots)]
    if not inside:
        raise PermissionError(f"{text.strip()!r} is outside the folders this server reads ({where or 'none'}); "
                              "start it with LAB_DATA_DIRS=/path/to/folder to add one")
    for c in inside:
        if c.is_file():
            return c
    raise FileNotFoundError(f"no file {text.strip()!r} in the folders this server reads ({where})")
