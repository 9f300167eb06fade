"""Whole directories between a store and this host: a stage that needs local files (torch, sentencepiece)
works on a local copy, and a local folder goes up to a URI, several files at once, its commit file last."""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import shutil
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from core import boundary, storage

log = logging.getLogger(__name__)

COPY_THREADS = 8  # storage.files copied at once to or from a store: its latency, not its bandwidth, bounds one copy


def upload_dir(local: Path, location: storage.Where, *, last: Sequence[str] = ()) -> list[str]:
    """Copy every file under the local directory `local` to `location` (a URI; a `file://` one too), several at
    once, then the files named in `last` in their order, each once the others are all there (a commit marker a
    reader looks for); the relative names copied, sorted. Into a local filesystem each file lands as a new file
    renamed into place (`storage.replace_bytes`), never into an inode that is there."""
    names = sorted(str(p.relative_to(local)).replace(os.sep, "/") for p in Path(local).rglob("*") if p.is_file())
    fs, path = storage.resolve(location)
    fs.create_dir(path, recursive=True)

    def copy(name: str) -> None:
        if fs.type_name in ("local", "hdfs"):
            storage.replace_bytes(storage.join(location, name), (Path(local) / name).read_bytes())
            return
        pafs.copy_files(
            str(Path(local) / name),
            posixpath.join(path, name),
            source_filesystem=pafs.LocalFileSystem(),
            destination_filesystem=fs,
        )

    _copy_all(copy, [n for n in names if n not in last])
    for name in (n for n in last if n in names):
        copy(name)
    return names


def download_dir(location: storage.Where, local: Path) -> list[str]:
    """Copy every file under `location` into the local directory `local`, several at once; the relative
    names, sorted."""
    fs, path = storage.resolve(location)
    names = [confined(local, name, location) for name in storage.files(location)]
    Path(local).mkdir(parents=True, exist_ok=True)

    def copy(name: str) -> None:
        target = Path(local).joinpath(*name.split("/"))
        boundary.make_parents(Path(local), name, 0o700)
        tmp = target.with_name(f".{target.name}.download-{uuid.uuid4().hex[:8]}")
        try:  # a new file, renamed into place: never through a link, never into an inode that is there
            with fs.open_input_stream(posixpath.join(path, name)) as source, _create(tmp) as out:
                shutil.copyfileobj(source, out, 1 << 20)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    _copy_all(copy, names)
    return names


def confined(local: Path, name: str, source: storage.Where) -> str:
    """`name`, from the listing of `source`, once it is a relative path inside its folder that lands inside
    `local` (`boundary.check_name`: no `..`, nothing absolute, no empty segment, as a manifest's names are);
    BoundaryError naming the source otherwise: a crafted listing (`m/../../x`, `m//x`) writes nothing."""
    boundary.check_name(name, f"the listing of {source}")
    if len(name.encode()) > _PATH_MAX or any(len(part.encode()) > _NAME_MAX for part in name.split("/")):
        raise boundary.BoundaryError(
            f"the listing of {source}: the name {name[:60]!r}... is longer than a local file name may be; "
            "the folder is refused"
        )
    return name


_NAME_MAX, _PATH_MAX = 255, 4096  # Linux's limits on one name and a whole path


def _create(path: Path):
    """A new file at `path`, opened for writing: never one that is there, never through a link."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    return os.fdopen(os.open(path, flags, 0o600), "wb")


def _copy_all(copy: Callable[[str], None], names: list[str]) -> None:
    """`copy(name)` for every name on a pool of threads; the first failure is raised once all have ended."""
    if len(names) < 2:
        for name in names:
            copy(name)
        return
    with ThreadPoolExecutor(min(COPY_THREADS, len(names))) as pool:
        for future in [pool.submit(copy, name) for name in names]:
            future.result()


class UntrustedCache(PermissionError):
    """The cache folder belongs to another user, or others may write to it."""


def cache_dir(kind: str) -> Path:
    """This user's cache folder for `kind` (`$XDG_CACHE_HOME/interlingua/<kind>`, else `~/.cache/...`): the
    product's own folder is created mode 0700 and must belong to this user and be writable by nobody else
    (UntrustedCache naming it otherwise), so that no other user can plant a copy for it to read."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "interlingua"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = root.stat()
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise UntrustedCache(
            f"{root}: the cache folder must belong to this user and be writable by no one else "
            f"(owner uid {info.st_uid}, mode {info.st_mode & 0o777:o}); remove it, or set "
            "XDG_CACHE_HOME to a folder of your own"
        )
    folder = root / kind
    folder.mkdir(exist_ok=True, mode=0o700)
    return folder


def cached_copy(location: storage.Where, kind: str, key: str, check: Callable[[Path], Any]) -> Path:
    """A local copy of the directory at `location` in this user's cache (`cache_dir(kind)/<key>`), downloaded
    once per `key` (a content hash: a changed source gets a new copy). `check(copy)` verifies a copy against
    what the source records (its sha256s, `key`) and raises to refuse it; it runs on every use, not only after
    the download: a cached copy that fails it is removed and fetched again. A new copy is made beside its
    place and renamed into it whole once checked, so concurrent fetches leave one complete copy and a reader
    never sees half of one."""
    local = cache_dir(kind) / key
    if local.is_dir():
        try:
            check(local)
            return local
        except Exception as exc:  # noqa: BLE001 - whatever the check refuses: this copy is not the source's
            log.warning("%s: the cached copy of %s fails its check (%s); fetching it again", local, location, exc)
            shutil.rmtree(local, ignore_errors=True)
    staging = local.with_name(f".{key}.{os.getpid()}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        download_dir(location, staging)
        check(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # a refused or half-made copy is never left behind
        raise
    try:
        os.rename(staging, local)
    except OSError:  # another process put the same copy there first: checked on its own use
        shutil.rmtree(staging, ignore_errors=True)
        check(local)
    log.info("fetched %s to %s", location, local)
    return local
