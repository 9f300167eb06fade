"""Only regular files of sane names: what a manifest names is looked at before it is opened (rule 4 of
`core.boundary`). Opening a FIFO blocks until a writer comes and a device never ends, so each is refused by
what it is, in one line, without opening it.
"""

from __future__ import annotations

import errno
import os
import stat

import pyarrow.fs as pafs

from core import storage
from core.boundary import BoundaryError, Located, is_local

# What a name may lead to besides a regular file, found by `os.lstat` (opening a FIFO blocks until a writer comes;
# a device never ends): each is refused by name, without opening it.
_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISLNK, "a symbolic link"),
)
_DAMAGED = "interlingua reads only regular files there: the folder is damaged or crafted"


def check_regular_file(
    location: str | os.PathLike | Located,
    named_in: str,
    *,
    error: type[Exception] = BoundaryError,
    follow_links: bool = False,
    advice: str = _DAMAGED,
) -> None:
    """Nothing when the file at `location` (a local path or a URI) is a regular file, or is not there (its reader
    names a missing file); otherwise `error`, one line naming it, what it is, `named_in` (the manifest or key
    that names it) and `advice`. Found without opening it: locally by `os.lstat` (a FIFO, a device, a socket, a
    directory or a link is refused; `follow_links`: `os.stat`, for a name a user gave, where a link to a file is
    the file), after refusing a name longer than the filesystem allows (a segment over NAME_MAX bytes, the
    whole over PATH_MAX); in a store, by the store's file info (a prefix, where a file should be)."""
    text = str(location)
    if not is_local(text):
        fs, path = storage.resolve(text)
        if fs.get_file_info(path).type == pafs.FileType.Directory:
            raise error(f"{text}: a folder (prefix), not a file, named in {named_in}; {advice}")
        return
    _check_name_length(text, f"{named_in}; {advice}", error)
    try:
        mode = (os.stat if follow_links else os.lstat)(text).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        if exc.errno not in (errno.ENAMETOOLONG, errno.ELOOP):
            raise
        kind = "a name longer than the filesystem allows" if exc.errno == errno.ENAMETOOLONG else "a loop of links"
        raise error(f"{_shown(text)}: {kind}, named in {named_in}; {advice}") from None
    for test, kind in _KINDS:
        if test(mode):
            raise error(f"{_shown(text)}: {kind}, not a regular file, named in {named_in}; {advice}")


def _check_name_length(text: str, named_in: str, error: type[Exception]) -> None:
    """`error` when a segment of the local path `text` is longer than NAME_MAX bytes or the whole than PATH_MAX,
    as the filesystem of its nearest existing folder says (255 and 4096 where it does not); `named_in` ends it."""
    encoded = os.fsencode(text)
    here = os.path.abspath(text)
    while not os.path.isdir(here):  # False for a name too long to look up: its parent is asked
        here = os.path.dirname(here)
    name_max, path_max = _limit(here, "PC_NAME_MAX", 255), _limit(here, "PC_PATH_MAX", 4096)
    longest = max((len(part) for part in encoded.split(b"/")), default=0)
    if longest > name_max or len(encoded) >= path_max:
        raise error(
            f"{_shown(text)}: a name longer than the filesystem allows (a part of {longest} bytes, NAME_MAX "
            f"{name_max}; {len(encoded)} bytes in all, PATH_MAX {path_max}), named in {named_in}"
        )


def _limit(folder: str, name: str, default: int) -> int:
    try:
        return int(os.pathconf(folder, name))
    except (OSError, ValueError):
        return default


def _shown(text: str) -> str:
    """A path cut for a one-line message: its start and its end."""
    return text if len(text) <= 160 else f"{text[:100]}...{text[-40:]}"
