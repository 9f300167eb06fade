"""The run dir's lock: one `interlingua run`, or one stage command, per run dir, across hosts.

A local run dir is locked with `flock` on `<run_dir>/.lock`: the OS releases it when the process dies.

An `s3://` run dir is locked by a lease object, `<run_dir>/.lock`, created with a conditional PUT and renewed
while the command runs; a holder whose lease was taken over stops (`orchestration.adapters.lease`).

Other schemes (gs://, hdfs://) have no conditional create through pyarrow: `run` refuses them, naming the
alternatives; every other command works there.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core.errors import UserError
from core.location import Location
from core.ownership import ForeignDataError
from orchestration.adapters.holder import HOLDER, holder_name
from orchestration.adapters.lease import S3Lease

LOCK_FILE = ".lock"
TTL_SECONDS = 60.0  # a dead holder's lock is taken over after this long without a renewal


class AlreadyRunning(RuntimeError):
    """Another `interlingua run` holds the run dir's lock (exit 5)."""


class LockUnsupported(UserError, ValueError):
    """A run dir on a filesystem with no conditional create."""


WAIT_HINT = "use --wait to wait for it"


@contextmanager
def run_lock(
    run_dir: Location | str | Path,
    wait: bool = False,
    *,
    ttl: float = TTL_SECONDS,
    poll: float = 2.0,
    hint: str = WAIT_HINT,
    name: str = LOCK_FILE,
) -> Iterator[None]:
    """Hold the run dir's lock for the block. AlreadyRunning when another command holds it (unless `wait`),
    its message ending with `hint`. `name`: the lock file's name in `run_dir` (`output_lock`'s, beside an
    output folder)."""
    where = Location.of(run_dir, "run_dir")
    kind = where.scheme
    if kind in ("local", "file"):
        local = where.local_path or Path(where.text[len("file://") :])  # file://: a path every host mounts
        with _flock(local, wait, hint, name):
            yield
    elif kind == "s3":
        lease = S3Lease(where.join(name).text, ttl)
        while not lease.acquire():
            if not wait:
                raise AlreadyRunning(
                    f"{lease.location} is held by another interlingua command ({lease.describe()}); {hint}"
                )
            time.sleep(poll)  # polling the store: there is nothing to wait on but its answer
        with lease.held():
            yield
    else:
        raise LockUnsupported(
            f"run_dir: {where}: `interlingua run` locks its run dir with a conditional "
            f"create, which {kind}:// lacks here; use an s3:// or local run_dir for `run` "
            "(prepare, train and evaluate run on any scheme)"
        )


@contextmanager
def stage_lock(run_dir: Location | str | Path, command: str, *, ttl: float = TTL_SECONDS) -> Iterator[None]:
    """The run dir's lock around one stage command (`prepare`, `train`, `evaluate`, `tune`), so that two of them,
    or one and a `run`, never write one run dir at once: the second exits 5 naming the holder. Where the
    filesystem has no conditional create (gs://, hdfs://) the stage runs unlocked, as it always has there."""
    where = Location.of(run_dir, "run_dir")
    if where.scheme not in ("local", "file", "s3"):
        yield
        return
    with run_lock(where, ttl=ttl, hint=f"`interlingua {command}` waits for no one: run it again once that one is done"):
        yield


@contextmanager
def output_lock(out_dir: Location | str | Path, command: str, *, ttl: float = TTL_SECONDS) -> Iterator[None]:
    """One writer at a time for an output folder that is not a run dir (`embed -o`): the lock file
    `.<name>.lock` beside it, so that the folder itself holds only the output. A second writer exits 5 naming
    the holder; without a conditional create (gs://, hdfs://) it runs unlocked, as the stages do."""
    where = Location.of(out_dir, "out_dir")
    if where.scheme not in ("local", "file", "s3") or not where.name:
        yield
        return
    if where.scheme == "local":  # beside the folder that the path leads to, links resolved
        where = Location.of(Path(where.text).resolve())
    with run_lock(
        where.parent,
        ttl=ttl,
        name=f".{where.name}.lock",
        hint=f"two `interlingua {command}` never write one output: run it again once that one is done",
    ):
        yield


@contextmanager
def _flock(run_dir: Path, wait: bool, hint: str = WAIT_HINT, name: str = LOCK_FILE) -> Iterator[None]:
    """`flock` on `<run_dir>/.lock`, the file removed again on release (a command leaves no trace of its lock).
    Removed before it is unlocked: a command that was waiting on the removed file finds, once it has the lock,
    that the path no longer names that file, and locks the path's new one instead."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / name
    while True:  # never through a link: a link in its place is refused (ELOOP), not followed
        handle = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644), "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError as exc:
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise AlreadyRunning(f"{run_dir} is in use by another interlingua command ({holder}); {hint}") from None
        try:
            if os.fstat(handle.fileno()).st_ino == os.stat(path).st_ino:
                break  # the file at the path: ours
        except FileNotFoundError:
            pass
        handle.close()  # its holder removed it while this one waited: lock the path's new file
    with handle:
        handle.seek(0)
        found = handle.read()
        if found.strip() and not HOLDER.fullmatch(found.strip()):
            raise ForeignDataError(
                f"{path}: interlingua locks the run dir with this file, but it holds what "
                "interlingua did not write; it never overwrites such a file: move it away"
            )
        handle.truncate(0)
        handle.write(holder_name())
        handle.flush()
        try:
            yield
        finally:
            path.unlink(missing_ok=True)
            fcntl.flock(handle, fcntl.LOCK_UN)
