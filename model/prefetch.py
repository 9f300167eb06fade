"""A worker's batch stream built ahead by a worker process: torch's DataLoader over a `model.stream.BatchStream`,
its batches in pinned memory for a GPU's asynchronous copies, its position and digest the stream's own.

    stream = prefetched(BatchStream(units, languages, paths, ...), ahead=8, pin_memory=True)
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Iterator

import torch

from model.stream import Batch, BatchStream, DataPosition


class _StreamSource(torch.utils.data.IterableDataset):
    """A `BatchStream`, rebuilt in a DataLoader worker process, as plain values the loader can pin:
    (epoch, signature, sources, targets, the position after the batch, the digest after it, the teacher's
    embeddings or None, their rows' weights or None)."""

    def __init__(self, stream: BatchStream) -> None:
        self.args = dict(
            units=stream.units,
            languages=stream.languages,
            paths=stream.paths,
            seed=stream.seed,
            rank=stream.rank,
            world=stream.world,
            max_tokens=stream.max_tokens,
            window_tuples=stream.window_tuples,
            monolingual=stream.monolingual,
            source_weights=stream.source_weights,
            position=stream.position,
            digest=stream.digest,
            teacher=stream.teacher,
        )

    def __iter__(self):
        stream = BatchStream(**self.args)
        for batch in stream:
            p = stream.position
            yield (
                batch.epoch,
                batch.signature,
                batch.sources,
                batch.targets,
                (p.epoch, p.window, p.batch, p.plan),
                stream.digest,
                batch.teacher,
                batch.teacher_weight,
            )


def _exit_without_finalizing(worker_id: int) -> None:
    """The DataLoader worker's `worker_init_fn`: when its loop has ended, the process exits as a forked child
    does (`os._exit` after the work, as multiprocessing's fork start method ends every child), not through the
    interpreter's finalization.

    Why: on close the worker stops its loop and closes its result queue without waiting for the queue's feeder
    thread (torch's `_worker_loop`: `cancel_join_thread`). That daemon thread may still be pickling a prefetched
    batch, inside torch's C++ `share_fd` with the GIL released. A spawned child then finalizes the interpreter,
    which ends daemon threads as they retake the GIL, by a forced unwind; through torch's C++ frame that unwind
    calls `std::terminate` ("terminate called without an active exception", SIGABRT), and the trainer's
    SIGCHLD handler raises. Seen in 5 of 20 open/consume/close cycles on a loaded 2-core machine;
    `benchmarks/prefetch_close.py` counts them. Nothing is lost: the batches still queued were never going to
    be read. atexit handlers run before daemon threads are stopped, so this one ends the process first."""
    atexit.register(_exit_now)


def _exit_now() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe: nothing more can be said
            pass
    os._exit(0)


class PrefetchedStream:
    """A `BatchStream` whose next `ahead` batches are built by a worker process (torch's DataLoader)
    while the model trains on the current one, in pinned memory when `pin_memory` (for a GPU's
    asynchronous copies). The batches, `position` and `digest` are the stream's own: `position`
    names the batch after the last one handed out, so a checkpoint resumes exactly as without it."""

    def __init__(self, stream: BatchStream, *, ahead: int, pin_memory: bool = False) -> None:
        self.position, self.digest = stream.position, stream.digest
        loader = torch.utils.data.DataLoader(
            _StreamSource(stream),
            batch_size=None,
            num_workers=1,
            prefetch_factor=ahead,
            pin_memory=pin_memory,
            multiprocessing_context="spawn",  # a fork of a Ray worker (threads, gRPC) is not safe
            worker_init_fn=_exit_without_finalizing,
        )
        self._batches: Iterator | None = iter(loader)

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        if self._batches is None:
            raise ValueError("the prefetched stream was closed")
        epoch, signature, sources, targets, position, digest, teacher, teacher_weight = next(self._batches)
        self.position, self.digest = DataPosition(*position), digest
        # the loader hands tuples back as lists
        return Batch(
            epoch,
            (tuple(signature[0]), tuple(signature[1])),
            {lang: tuple(pair) for lang, pair in sources.items()},
            {lang: tuple(pair) for lang, pair in targets.items()},
            {lang: tuple(pair) for lang, pair in teacher.items()} if teacher is not None else None,
            teacher_weight,
        )

    def close(self) -> None:
        """Stops the worker process and waits for it (it also stops when this object is collected): the
        loader's iterator shuts its workers down when it is released, which is the loader's public way."""
        self._batches = None


def prefetched(stream: BatchStream, ahead: int, *, pin_memory: bool = False) -> BatchStream | PrefetchedStream:
    """`stream` with `ahead` batches built in a worker process; `stream` itself when `ahead` is 0."""
    return PrefetchedStream(stream, ahead=ahead, pin_memory=pin_memory) if ahead else stream
