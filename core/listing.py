"""Listing a folder of a pyarrow filesystem: its subdirectories, entries and files (`core.storage`'s functions
of the same names resolve a location to `(fs, path)` and call these). A local folder is walked without
following a link (a link is listed as an entry of its own); a store's prefix is listed recursively."""

from __future__ import annotations

import os

import pyarrow.fs as pafs


def subdirectories(fs: pafs.FileSystem, path: str) -> list[str]:
    """The names of the directories (prefixes) directly under `path`; [] if there is none."""
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return []
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=False))
    return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)


def entries(fs: pafs.FileSystem, path: str) -> list[str]:
    """Every file and directory under `path`, as '/'-separated paths relative to it, sorted (parents
    before their children); [] when there is nothing there. Locally a link is listed as an entry of its own and
    never followed (its target's files are not under `path`: `core.boundary`)."""
    return [name for name, _ in _listing(fs, path)]


def files(fs: pafs.FileSystem, path: str) -> list[str]:
    """The files under `path` (not the directories, nor links), as in `entries`."""
    return [name for name, is_file in _listing(fs, path) if is_file]


def _listing(fs: pafs.FileSystem, path: str) -> list[tuple[str, bool]]:
    """(relative path, whether it is a regular file) of everything under `path`, sorted."""
    if fs.type_name == "local":
        if not os.path.isdir(path) or os.path.islink(path):
            return []
        found = []
        for here, folders, names in os.walk(path, followlinks=False):  # a link to a folder: listed, not entered
            rel = os.path.relpath(here, path)
            for name in folders + names:
                full = os.path.join(here, name)
                found.append(
                    (
                        name if rel == "." else f"{rel}/{name}".replace(os.sep, "/"),
                        os.path.isfile(full) and not os.path.islink(full),
                    )
                )
        return sorted(found)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return []
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    root = path.rstrip("/") + "/"
    return sorted((i.path[len(root) :], i.type == pafs.FileType.File) for i in infos if i.path.startswith(root))
