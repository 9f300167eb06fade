"""Output folders held open while a command writes into them: what was checked is what is written.

A check made before a long step does not hold after it (STYLE.md, "Data safety"): an output folder that was
checked to hold only the product's files can be replaced by a link, or by another folder, before its files are
written. So the folder's identity (device and inode) is taken when its ownership is checked (`seen`), and while
a command writes into it (`held`), every local write under it (`core.storage.replace_bytes`) walks down from
that folder as it was: the folder opened without following a link and checked to be the one that was seen,
each folder below it opened relative to its parent, never through a link, the new file created and renamed
relative to its own folder (`dir_fd`). A folder replaced meanwhile refuses the write in one line, and nothing
lands in the folder a link now leads to.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

from core.boundary import BoundaryError

_LOCK = threading.Lock()
_SEEN: dict[str, tuple[int, int]] = {}  # folder (absolute, as named) -> (device, inode) when its ownership was checked
_HELD: list[tuple[str, int, int]] = []  # folders being written into, innermost last

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def seen(folder: Path) -> None:
    """Record the identity of the local `folder` as its ownership is checked (nothing when it is not there)."""
    try:
        info = os.stat(folder, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        with _LOCK:
            _SEEN[os.path.abspath(folder)] = (info.st_dev, info.st_ino)


@contextlib.contextmanager
def held(folder: Path) -> Iterator[None]:
    """While the block runs, every local write under `folder` goes through the folder as it was seen (`seen`; a
    folder made now: as it is now). BoundaryError when it is a link, or another folder than the one seen."""
    root = os.path.abspath(folder)
    folder.mkdir(parents=True, exist_ok=True)
    info = os.stat(root, follow_symlinks=False)
    with _LOCK:
        expected = _SEEN.pop(root, (info.st_dev, info.st_ino))
    if not stat.S_ISDIR(info.st_mode) or (info.st_dev, info.st_ino) != expected:
        raise _replaced(root)
    with _LOCK:
        _HELD.append((root, *expected))
    try:
        yield
    finally:
        with _LOCK:
            _HELD.remove((root, *expected))


def _replaced(root: str) -> BoundaryError:
    return BoundaryError(
        f"{root}: the output folder was replaced (by a symbolic link or another folder) after interlingua "
        "checked it; nothing is written there: run the command again"
    )


def holder_of(path: str) -> tuple[str, int, int] | None:
    """The innermost held folder that `path` (absolute) lies under, if any."""
    with _LOCK:
        for root, dev, ino in reversed(_HELD):
            if path.startswith(root.rstrip("/") + "/"):
                return root, dev, ino
    return None


def replace_under(held_root: tuple[str, int, int], path: str, data: bytes) -> None:
    """Write `data` as the file `path` under the held folder: a new file renamed into place, every folder on
    the way opened relative to the one above it, none through a link (see the module docstring)."""
    root, dev, ino = held_root
    parts = os.path.relpath(path, root).split(os.sep)
    try:
        fd = os.open(root, _DIR)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
            raise _replaced(root) from None
        raise
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != (dev, ino):
            raise _replaced(root)
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o777, dir_fd=fd)
            try:
                below = os.open(part, _DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise BoundaryError(
                        f"{path}: {part} is not a folder of interlingua's (a symbolic link or a file); nothing is "
                        "written through it"
                    ) from None
                raise
            os.close(fd)
            fd = below
        name = parts[-1]
        tmp = f"{name}.tmp-{uuid.uuid4().hex[:8]}"  # `ownership._TMP`
        out = os.open(tmp, _NEW, 0o644, dir_fd=fd)
        try:
            with os.fdopen(out, "wb") as stream:
                stream.write(data)
            os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            raise
    finally:
        os.close(fd)
