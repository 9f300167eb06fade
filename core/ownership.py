"""Output ownership: what the product may replace or clean.

The rule (STYLE.md, "Data safety"): a directory or prefix is replaced or cleaned only where everything in
it is the product's own output of that kind, as its manifest (with the format marker) or its staging
marker says; only those entries are removed; anything else is refused, naming the path and what is there.
Every location is a local path or a URI (`core.storage`).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Callable
from pathlib import Path

import pyarrow.fs as pafs

from core import boundary, fencing, storage
from core.errors import UserError

STAGING_MARKER = ".interlingua-staging"  # inside every staging directory or prefix the product makes
JOURNAL = ".interlingua-writing.json"  # the files an output is about to write in place, until its manifest is


_TMP = re.compile(r"\.tmp-[0-9a-f]{8}$")  # `storage.replace_bytes`'s temporary name beside the file
# the product's lock files (`orchestration.adapters.lock`): a run dir's `.lock`, an output's `.<name>.lock`
# beside it; one left by a killed holder is its own, recognized by what it holds (`is_own_lock`)
_LOCK = re.compile(r"(?:^|/)\.(?:[^/]+\.)?lock$")
HOLDER = re.compile(r"pid \d+ on \S+")  # what a lock's holder writes (`orchestration.adapters.holder`)


class ForeignDataError(UserError, ValueError):
    """A location holding files the product did not write: it is neither replaced, cleaned nor written into."""


def check_only_ours(location: storage.Where, ours: Callable[[str], bool], *, what: str, advice: str) -> list[str]:
    """The entries under `location` (see `entries`) once each is the product's (`ours(relative path)`).

    ForeignDataError naming the location and what else is there (then nothing may be removed or replaced),
    or when `location` is a file. `what` names the key or flag that chose it; `advice` says what to do.
    """
    fs, path = storage.resolve(location)
    if fs.get_file_info(path).type == pafs.FileType.File:
        raise ForeignDataError(f"{what}: {location} is a file, not a directory; {advice}")
    boundary.check_no_links(location, what)  # nothing of ours is a link: none is deleted or written through
    found = storage.entries(location)

    def product(e: str) -> bool:  # a kind's own, a killed replace_bytes's temporary file, a killed holder's lock
        return ours(e) or bool(_TMP.search(e)) and ours(_TMP.sub("", e)) or is_own_lock(location, e)

    foreign: list[str] = []  # the topmost only: `sub/`, not every file under it
    for e in found:
        parents = {"/".join(e.split("/")[:i]) for i in range(1, e.count("/") + 1)}
        if not product(e) and not parents.intersection(foreign):
            foreign.append(e)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise ForeignDataError(
            f"{what}: {location} holds what interlingua did not write ({shown}); it never "
            f"deletes or overwrites such files: {advice}"
        )
    return found


def is_own_lock(location: storage.Where, relative: str) -> bool:
    """Whether `relative` under `location` is a lock file the product wrote: a lock's name, holding nothing or
    the holder line a lock writes (a local lock), or a lease object's JSON (a store's). A killed command leaves
    its lock file behind (the OS drops the lock, not the file): its rerun takes it for its own, under the lock
    rules (`orchestration.adapters.lock`), where a user's file of that name is refused."""
    if not _LOCK.search(relative):
        return False
    target = storage.join(location, relative)
    try:
        if storage.size(target) > 4096:
            return False
        text = storage.read_bytes(target).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return False
    if not text or HOLDER.fullmatch(text):
        return True
    try:
        lease = json.loads(text)
    except ValueError:
        return False
    return isinstance(lease, dict) and isinstance(lease.get("holder"), str) and bool(HOLDER.fullmatch(lease["holder"]))


def remove_ours(location: storage.Where, relatives: list[str], *, keep_root: bool = False, last: str = "") -> None:
    """Delete exactly the files among `relatives` (entries checked by `check_only_ours`), `last` (an output's
    manifest, which vouches for the rest until it goes) after the others, then those of its directories that
    are left empty, deepest first, and `location` itself when empty (unless `keep_root`). A directory that
    something new appeared in is kept."""
    relatives = sorted(relatives, key=lambda relative: relative == last) if last else relatives
    fs, path = storage.resolve(location)
    if fs.type_name == "local":  # checked by `check_only_ours`; checked again at the last moment
        links = [r for r in ["", *relatives] if os.path.islink(posixpath.join(path, r) if r else path)]
        if links:
            raise boundary.BoundaryError(
                f"{location}: {', '.join(links[:3]) or 'the folder itself'} became a "
                "symbolic link; nothing is deleted through a link"
            )
    infos = {r: fs.get_file_info(posixpath.join(path, r)) for r in relatives}
    for info in infos.values():
        if info.type == pafs.FileType.File:
            fs.delete_file(info.path)
    folders = [info.path for info in infos.values() if info.type == pafs.FileType.Directory]
    for folder in sorted(folders, key=len, reverse=True) + ([] if keep_root else [path]):
        _delete_if_empty(fs, folder)


def _delete_if_empty(fs: pafs.FileSystem, path: str) -> None:
    if fs.get_file_info(path).type == pafs.FileType.Directory and not fs.get_file_info(
        pafs.FileSelector(path, recursive=False)
    ):
        fs.delete_dir(path)


def is_staging(location: storage.Where) -> bool:
    """Whether `location` is a staging directory or prefix the product made (it holds the marker)."""
    return storage.exists(storage.join(location, STAGING_MARKER))


def make_staging(location: storage.Where) -> None:
    """An empty staging directory (or prefix) at `location`, marked as the product's. One left by a crashed
    run (marked) is removed first; anything else there is refused (ForeignDataError), never deleted."""
    fs, path = storage.resolve(location)
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        found = [] if is_staging(location) else storage.entries(location)
        if found and all(_TMP.sub("", e) == STAGING_MARKER for e in found):  # killed while marking it
            remove_ours(location, found)
            found = []
        if found:
            raise ForeignDataError(
                f"{location}: interlingua stages its output here, but this path holds files "
                f"it did not write ({', '.join(found[:3])}); move them away"
            )
        remove_staging(location)
    fs.create_dir(path, recursive=True)
    storage.write_bytes(storage.join(location, STAGING_MARKER), b"interlingua staging; removed with its directory\n")


def remove_staging(location: storage.Where) -> None:
    """Delete a staging directory (or prefix) the product made, with all it holds; nothing if it is absent,
    empty, or not marked as the product's."""
    fs, path = storage.resolve(location)
    if fs.type_name == "local" and os.path.islink(path):
        raise boundary.BoundaryError(
            f"{location}: a symbolic link where interlingua stages its output; remove "
            "it (nothing is deleted through a link)"
        )
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.Directory and is_staging(location):
        fs.delete_dir(path)
    elif info.type == pafs.FileType.Directory:
        _delete_if_empty(fs, path)


def remove_temporaries(location: storage.Where, ours: Callable[[str], bool]) -> None:
    """Delete what a killed `storage.replace_bytes` left under `location`: its temporary files beside names that
    are the product's (`ours`), which no reader opens and no writer finishes."""
    left = [e for e in storage.entries(location) if _TMP.search(e) and ours(_TMP.sub("", e))]
    if left:
        remove_ours(location, left, keep_root=True)


def with_parents(relatives) -> set[str]:
    """The relative paths and every directory above them: what an output of these files consists of."""
    out: set[str] = set()
    for relative in relatives:
        parts = relative.split("/")
        out.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return out


def is_stage_state(location: storage.Where) -> bool:
    """Whether the file at `location` is a stage's state file the product wrote (`train/run.json`, an
    evaluation's `state.json`): a JSON object with its fingerprint. The record that vouches for the files of
    fixed names beside it; without it, files of those names are a user's."""
    if not storage.exists(location):  # absent, or a folder of that name
        return False
    try:
        state = storage.read_json(location)
    except (FileNotFoundError, ValueError):  # removed meanwhile, or not JSON
        return False
    return isinstance(state, dict) and isinstance(state.get("fingerprint"), str)


def begin_writes(location: storage.Where, names: list[str]) -> None:
    """Record, before writing them in place under `location`, the files about to be written (relative
    names), added to those recorded before: if the run dies before its manifest, the rerun knows them for
    the product's (`recorded_writes`). `end_writes` once the manifest names them."""
    storage.write_json(storage.join(location, JOURNAL), sorted(recorded_writes(location) | set(names)))


def recorded_writes(location: storage.Where) -> set[str]:
    """The files `begin_writes` recorded under `location` and no manifest took over yet."""
    try:
        names = storage.read_json(storage.join(location, JOURNAL))
    except (OSError, ValueError):  # none, or `location` is a file (refused by `check_only_ours`)
        return set()
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def end_writes(location: storage.Where) -> None:
    """Forget the recorded writes: the manifest written last now names them."""
    if storage.exists(storage.join(location, JOURNAL)):
        storage.delete_file(storage.join(location, JOURNAL))


def swap_in(staging: Path, target: Path, previous: list[str] | None, *, last: str = "") -> None:
    """Put a finished local staging directory (`make_staging`) in place of `target` by two renames: the
    previous `target` stays whole until the new one is in; then only `previous`, its entries that were
    checked to be the product's (`check_only_ours`), are removed, `last` (its manifest) after the rest, so that
    a run killed meanwhile leaves a set-aside folder its manifest still vouches for (`set_aside`). `previous`
    None: there was none."""
    fencing.check()
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    if previous is not None:
        os.replace(target, old)
    os.replace(staging, target)
    (target / STAGING_MARKER).unlink(missing_ok=True)
    if previous is not None:
        remove_ours(old, previous, last=last)


def set_aside(target: Path) -> list[Path]:
    """The previous outputs that `swap_in` set aside beside `target` (`.<name>.old-<pid>`) and a killed run
    left: real folders (never a link), to be removed as the product's once their kind vouches for them."""
    pattern = re.compile(rf"\.{re.escape(target.name)}\.old-\d+")
    if not target.parent.is_dir():
        return []
    return sorted(p for p in target.parent.iterdir() if pattern.fullmatch(p.name) and p.is_dir() and not p.is_symlink())
