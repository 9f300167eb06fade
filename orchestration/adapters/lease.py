"""The lease on an `s3://` run dir (`orchestration.adapters.lock`): its acquisition, its renewal and its holder's
fence. Who holds it is `orchestration.adapters.holder`'s; the fence of the processes that commit for its holder
on other hosts, `orchestration.adapters.worker_fence`'s.

The lease is `<run_dir>/.lock`, created with a conditional PUT (`If-None-Match: *`): exactly one of two hosts
racing for it succeeds. The holder renews it every `ttl / 3` seconds with a PUT conditional on its own ETag
(`If-Match`); a holder that dies stops renewing. A waiting host takes it over only once it has not been renewed
for `ttl` seconds, by the store's own clock (the object's Last-Modified against the response's Date: no two
hosts' clocks are compared), or at once when the lease names a process of its own host (boot id and pid
namespace) that has exited, as after a killed command; either way with a DELETE conditional on the ETag it
read, so two hosts that take it over at once cannot both have it. A holder that finds its lease taken over (a
renewal refused) interrupts its own run, which then exits 130 with its MLflow runs KILLED: two hosts never both
write the run dir.
"""

from __future__ import annotations

import _thread
import json
import logging
import os
import signal
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from email.utils import parsedate_to_datetime

from core import fencing
from core.ownership import ForeignDataError
from orchestration.adapters.holder import HOLDER, holder_name, is_gone, process_of

log = logging.getLogger(__name__)


class LeaseLost(KeyboardInterrupt):
    """This run's lease was taken over by another host: the run stops here (exit 130), as on Ctrl+C."""

    REASON = "the run lock's lease was taken over by another host"


LEASE_SIGNAL = signal.SIGUSR2  # how the renewing thread stops the main one; SIGINT may be ignored (`cmd &`)


class S3Lease:
    """The lease object at `location` (an s3:// URI), through boto3: pyarrow exposes no conditional PUT.
    `acquire` it, then hold it for a block (`held`): renewed, and the block's commits fenced."""

    def __init__(self, location: str, ttl: float) -> None:
        import boto3

        self.bucket, self.key = bucket_key(location)
        self.location, self.ttl = location, ttl
        self.client = boto3.client("s3")  # endpoint, keys and region from the environment (`connection.configure`)
        self.etag: str | None = None
        self.holder = holder_name()
        self.process = process_of(os.getpid())
        self.writing = threading.Lock()  # a renewal (PUT, then its ETag kept) against the fence's look

    @contextmanager
    def held(self) -> Iterator[None]:
        """The acquired lease held for the block: renewed every `ttl / 3` seconds, every commit fenced."""
        stop = threading.Event()
        # A lost lease stops the main thread through a signal handler of its own: `_thread.interrupt_main()`
        # alone does nothing where SIGINT is ignored, as it is for `interlingua run &` from a script.
        on_main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(LEASE_SIGNAL, _lease_lost) if on_main else None
        renewer = threading.Thread(target=self._renew, args=(stop, on_main), name="run-lock-lease", daemon=True)
        renewer.start()
        _HELD.append(self.lease())
        try:
            with fencing.fenced(self._still_held):
                yield
        finally:
            _HELD.pop()
            stop.set()
            renewer.join()
            if on_main:
                signal.signal(LEASE_SIGNAL, previous)
            self._release()

    def lease(self) -> dict:
        """What tells this holder's lease from any other's whatever its renewals: for `worker_fence`."""
        return {"location": self.location, "holder": self.holder, "process": self.process}

    def _body(self) -> bytes:
        """The lease's content: who holds it and a token of this write alone, so that every acquisition and
        renewal has an ETag of its own (a renewal between another host's HEAD and its conditional DELETE
        makes that DELETE fail, and a lease another process wrote never has this one's ETag)."""
        return json.dumps({"holder": self.holder, "token": uuid.uuid4().hex, "process": self.process}).encode()

    def acquire(self) -> bool:
        """True once this process holds the lease (created, or taken over from a holder that is gone)."""
        from botocore.exceptions import ClientError

        for _ in range(2):  # once more after a lease found dead was deleted: a rerun need not --wait
            try:
                self.etag = self.client.put_object(
                    Bucket=self.bucket, Key=self.key, Body=self._body(), IfNoneMatch="*"
                )["ETag"]
                return True
            except ClientError as exc:
                if error_code(exc) not in ("PreconditionFailed", "ConditionalRequestConflict"):
                    raise
            if not self._take_over_stale():
                return False
        return False

    def _take_over_stale(self) -> bool:
        """Delete a lease whose holder is gone (conditional on its ETag): True when there is none now, so that
        the caller races for it again."""
        from botocore.exceptions import ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.key)
        except ClientError as exc:
            if error_code(exc) in MISSING:
                return True  # released meanwhile
            raise
        now = parsedate_to_datetime(head["ResponseMetadata"]["HTTPHeaders"]["date"])
        # Both times are whole seconds: one more second, so that a lease renewed in time is never stale.
        stale = (now - head["LastModified"]).total_seconds() >= self.ttl + 1
        try:
            lease = self._check_is_lease(head["ETag"])
        except ClientError as exc:
            if error_code(exc) in ("PreconditionFailed", *MISSING):
                return False  # renewed or released meanwhile: not stale
            raise
        if stale:
            log.warning(
                "%s was last renewed at %s, more than %.0f s ago: its holder is gone; taking it over",
                self.location,
                head["LastModified"],
                self.ttl,
            )
        elif is_gone(lease.get("process")):  # a command of this host killed a moment ago: no need to wait
            log.warning(
                "%s is held by %s, a process of this host that has exited: taking it over",
                self.location,
                lease["holder"],
            )
        else:
            return False
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=head["ETag"])
        except ClientError as exc:
            if error_code(exc) == "PreconditionFailed":
                return False  # renewed meanwhile: alive after all
            if error_code(exc) not in MISSING:
                raise
        return True  # gone: the caller creates it, or sees who did

    def _renew(self, stop: threading.Event, signalled: bool) -> None:
        from botocore.exceptions import ClientError

        while not stop.wait(self.ttl / 3):
            try:
                with self.writing:
                    self.etag = self.client.put_object(
                        Bucket=self.bucket, Key=self.key, Body=self._body(), IfMatch=self.etag
                    )["ETag"]
            except ClientError as exc:
                if error_code(exc) not in ("PreconditionFailed", *MISSING):
                    log.warning("%s: renewing the lease failed (%s); trying again", self.location, exc)
                    continue
                log.error("%s: the lease was taken over by another host; stopping this run", self.location)
                _LOST.append(self.location)
                _thread.interrupt_main(LEASE_SIGNAL if signalled else signal.SIGINT)
                return

    def _still_held(self) -> None:
        """The fence (`core.fencing`): LeaseLost unless the lease object is still the one this holder wrote
        last (one HEAD); a holder whose lease was taken over commits nothing more."""
        from botocore.exceptions import ClientError

        with self.writing:
            try:
                current = self.client.head_object(Bucket=self.bucket, Key=self.key)["ETag"]
            except ClientError as exc:
                if error_code(exc) not in MISSING:
                    raise
                current = None
            if current != self.etag:
                log.error("%s: the lease was taken over by another host; this run commits nothing more", self.location)
                _LOST.append(self.location)
                raise LeaseLost(LeaseLost.REASON)

    def _release(self) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=self.etag)
        except ClientError as exc:  # taken over: it is not ours to delete
            log.warning("%s: not released (%s)", self.location, error_code(exc))

    def _check_is_lease(self, etag: str) -> dict:
        """The lease (this version of the object), or ForeignDataError unless it is one that interlingua wrote:
        a user's file of that name is never taken over, however old. (A lease without `process` is of an
        earlier version.)"""
        body = self.client.get_object(Bucket=self.bucket, Key=self.key, IfMatch=etag)["Body"].read()
        try:
            lease = json.loads(body)
            ours = (
                isinstance(lease, dict)
                and set(lease) - {"process"} == {"holder", "token"}
                and HOLDER.fullmatch(lease["holder"])
            )
        except (ValueError, TypeError):
            ours = False
        if not ours:
            raise ForeignDataError(
                f"{self.location}: interlingua locks the run dir with this object, but it holds "
                "what interlingua did not write; it never replaces such a file: move it away"
            )
        return lease

    def describe(self) -> str:
        """Who holds the lease, for a message."""
        try:
            return json.loads(self.client.get_object(Bucket=self.bucket, Key=self.key)["Body"].read())["holder"]
        except Exception:  # noqa: BLE001 - only for the message; released meanwhile, or not ours
            return "holder unknown"


_HELD: list[dict] = []  # the leases this process holds (`S3Lease.lease`), innermost last
_LOST: list[str] = []  # the leases this process found taken over


def lease_lost() -> bool:
    """Whether this process found a lease of its own taken over since the last call (which forgets it): an
    interrupt that reaches the command's top as a plain KeyboardInterrupt (through Ray's handler) is then that.
    The CLI calls it once before a command and once after an interrupt."""
    lost = bool(_LOST)
    _LOST.clear()
    return lost


def held_lease() -> dict | None:
    """The lease this process holds on its run dir in a bucket, if any: handed to the processes that commit
    for it (the training workers), which fence their commits with `worker_fence`."""
    return _HELD[-1] if _HELD else None


def bucket_key(location: str) -> tuple[str, str]:
    """The bucket and key of an s3:// URI."""
    bucket, _, key = location[len("s3://") :].partition("/")
    return bucket, key


def _lease_lost(signum: int, frame) -> None:
    raise LeaseLost(LeaseLost.REASON)


MISSING = ("404", "NoSuchKey", "NotFound")  # the codes of a lease object that is not there (GET, HEAD, DELETE)


def error_code(exc) -> str:
    """The S3 error code of a botocore ClientError ("" when it names none)."""
    return str(exc.response.get("Error", {}).get("Code", ""))
