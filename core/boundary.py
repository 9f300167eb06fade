"""The filesystem boundary: what a name read from a manifest may be, and what a link in a folder may do.

A folder the product reads (a dataset, a model directory, an export, an embeddings store, a teacher's store, a
mined folder) may come from a bucket, a registry or a colleague: someone else wrote it. Three rules hold for
every one of them, here, so that no reader re-implements them:

1. A name read from a manifest is a relative '/'-separated path inside its folder: no `..` segment, nothing
   absolute, no scheme, no empty segment, no backslash or NUL (`check_name`; `Name` is the pydantic type
   of every manifest field that names a file). `storage.join` applies it to every part it joins, so a name
   that escapes is refused wherever it is used, before anything is read.
2. Links are refused outright in the product's folders (`check_no_links`, `local_links`): a folder of ours
   holds files and folders only. A link in it is neither read (it could lead to /etc/shadow), listed as the
   product's (its target's files would count as ours), written through nor deleted through. A bucket has no
   links: there the rule holds by itself.
3. Refusals never quote what they refused to read: the message names the folder and the entry, never a hash
   or a line of a file outside.
4. A file a manifest names is a regular file of a name the filesystem can hold
   (`core.regular.check_regular_file`), found without opening it: a FIFO would block its reader until killed,
   a device never ends, a directory or an over-long name ends in a traceback. Every reader checks the files
   its manifest names before any work.

Files handed over in memory (a model shipped to Ray actors) land only through `land`, under the same rules.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Annotated, Protocol

from pydantic import AfterValidator

from core.errors import UserError


class Located(Protocol):
    """A value naming a local path or a URI by its text (`core.location.Location`), as `str()` gives it."""

    @property
    def text(self) -> str: ...


# a segment a name may hold: anything printable but the separators; "." and ".." are refused separately
_BAD_CHARS = re.compile(r"[\\\x00-\x1f]")
_DRIVE = re.compile(r"^[A-Za-z]:")


class BoundaryError(UserError, ValueError):
    """A name or a link that would lead outside its folder: the folder is refused (exit 2, the input's fault)."""


def check_name(name: str, what: str = "a manifest") -> str:
    """`name` once it is a relative path inside its folder (see the module docstring); BoundaryError naming
    `what` (the file or field it was read from) otherwise."""
    if not isinstance(name, str) or not name:
        raise BoundaryError(f"{what}: an empty file name; the folder is damaged or was not written by interlingua")
    parts = name.split("/")
    if (
        name.startswith("/")
        or "://" in name
        or _DRIVE.match(name)
        or _BAD_CHARS.search(name)
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise BoundaryError(
            f"{what}: the file name {name!r} is not a relative path inside its folder (no '..', "
            "nothing absolute); the folder is refused: it was damaged or crafted"
        )
    return name


def _validated(name: str) -> str:
    return check_name(name, "a file name")


# Every manifest field that names a file (pydantic turns the BoundaryError into a validation error on the field).
Name = Annotated[str, AfterValidator(_validated)]


def is_local(location: str | os.PathLike | Located) -> bool:
    return "://" not in str(location)


def local_links(folder: str | os.PathLike | Located) -> list[str]:
    """The links under the local `folder` (itself included, as ""), as '/'-separated paths relative to it,
    sorted, found without following any; [] when `folder` does not exist."""
    root = Path(str(folder))
    try:
        if stat.S_ISLNK(os.lstat(root).st_mode):
            return [""]
    except FileNotFoundError:
        return []
    found: list[str] = []
    stack = [root]
    while stack:
        here = stack.pop()
        try:
            entries = list(os.scandir(here))
        except (NotADirectoryError, FileNotFoundError):
            continue
        for entry in entries:
            if entry.is_symlink():
                found.append(Path(entry.path).relative_to(root).as_posix())
            elif entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
    return sorted(found)


def check_no_links(folder: str | os.PathLike | Located, what: str) -> None:
    """BoundaryError when the local `folder` (`what`: its kind, e.g. "model directory") is itself a link or
    holds one; nothing for a URI. The message names the links, never their targets or what is there."""
    if not is_local(folder):
        return
    links = local_links(folder)
    if links:
        shown = ", ".join(link or "(the folder itself)" for link in links[:3])
        more = f" and {len(links) - 3} more" if len(links) > 3 else ""
        raise BoundaryError(
            f"{what} {folder} holds symbolic links ({shown}{more}); interlingua neither reads, "
            "writes nor deletes through links in its folders: replace them with the files"
        )


def land(folder: str | os.PathLike, name: str, data: bytes) -> Path:
    """Write `data` as the new file `folder/name` (a name checked by `check_name`), creating its parent
    folders under `folder`: never through a link (O_NOFOLLOW on the file, each parent made here or checked),
    never over a file that is there (O_EXCL). Returns its path. BoundaryError for a name that escapes."""
    check_name(name, f"a file shipped into {folder}")
    root = Path(folder)
    target = root.joinpath(*name.split("/"))
    make_parents(root, name)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return target


def make_parents(root: Path, name: str, mode: int = 0o777) -> None:
    """The folders of `name` (a checked relative name) under `root`, each made here or checked to be a folder:
    BoundaryError for a link or a file where a folder goes, so nothing is written through it."""
    here = root
    for part in name.split("/")[:-1]:
        here = here / part
        try:
            os.mkdir(here, mode)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(here).st_mode):  # a link or a file where a folder goes
                raise BoundaryError(f"{here}: not a folder of ours; nothing is written through it") from None


def check_segment(name: str, what: str = "a manifest") -> str:
    """`name` once it is one path segment (a language, a block's or an encoder's name: no '/'), as
    `check_name`; BoundaryError otherwise."""
    check_name(name, what)
    if "/" in name:
        raise BoundaryError(
            f"{what}: {name!r} must be a single name (no '/'); the folder is refused: it was damaged or crafted"
        )
    return name


# A field that becomes one segment of a path (a language, a block's name).
Segment = Annotated[str, AfterValidator(lambda name: check_segment(name, "a name"))]
