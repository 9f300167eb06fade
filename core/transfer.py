"""Whole directories between a store and this host: a stage that needs local files (torch, sentencepiece)
works on a local copy, and a local folder goes up to a URI, several files at once, its commit file last."""
from __future__ import annotations

import logging
import os
import posixpath
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

import pyarrow.fs as pafs

from core import storage

log = logging.getLogger(__name__)

COPY_THREADS = 8  # storage.files copied at once to or from a store: its latency, not its bandwidth, bounds one copy


def upload_dir(local: Path, location: storage.Location, *, last: Sequence[str] = ()) -> list[str]:
    """Copy every file under the local directory `local` to `location` (a local path or a URI), several at
    once, then the storage.files named in `last` in their order, each once the others are all there (a commit marker
    a reader looks for); the relative names copied, sorted."""
    names = sorted(str(p.relative_to(local)).replace(os.sep, "/") for p in Path(local).rglob("*") if p.is_file())
    fs, path = storage.resolve(location)
    fs.create_dir(path, recursive=True)

    def copy(name: str) -> None:
        pafs.copy_files(str(Path(local) / name), posixpath.join(path, name),
                        source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)

    _copy_all(copy, [n for n in names if n not in last])
    for name in (n for n in last if n in names):
        copy(name)
    return names


def download_dir(location: storage.Location, local: Path) -> list[str]:
    """Copy every file under `location` into the local directory `local`, several at once; the relative
    names, sorted."""
    fs, path = storage.resolve(location)
    names = storage.files(location)

    def copy(name: str) -> None:
        (Path(local) / name).parent.mkdir(parents=True, exist_ok=True)
        pafs.copy_files(posixpath.join(path, name), str(Path(local) / name), source_filesystem=fs,
                        destination_filesystem=pafs.LocalFileSystem())

    _copy_all(copy, names)
    return names


def _copy_all(copy: Callable[[str], None], names: list[str]) -> None:
    """`copy(name)` for every name on a pool of threads; the first failure is raised once all have ended."""
    if len(names) < 2:
        for name in names:
            copy(name)
        return
    with ThreadPoolExecutor(min(COPY_THREADS, len(names))) as pool:
        for future in [pool.submit(copy, name) for name in names]:
            future.result()


def cached_copy(location: storage.Location, kind: str, key: str, check: Callable[[Path], Any] | None = None) -> Path:
    """A local copy of the directory at `location` in this host's temp folder (`$TMPDIR/interlingua-<kind>/
    <key>`), downloaded once per host and `key` (a content hash: a changed source gets a new copy). The copy
    is made beside it and renamed into place whole, after `check(copy)` (which raises to refuse it), so
    concurrent fetches on one host leave one complete copy and a reader never sees half of one."""
    local = Path(tempfile.gettempdir()) / f"interlingua-{kind}" / key
    if not local.is_dir():
        staging = local.with_name(f".{key}.{os.getpid()}.partial")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            download_dir(location, staging)
            if check is not None:
                check(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)  # a refused or half-made copy is never left behind
            raise
        try:
            os.rename(staging, local)
        except OSError:  # another process put the same copy there first
            shutil.rmtree(staging, ignore_errors=True)
        log.info("fetched %s to %s", location, local)
    return local
