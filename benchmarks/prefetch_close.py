"""Open, consume and close the training stream's prefetching worker many times; count the workers that did not
exit cleanly.

    .venv/bin/python benchmarks/prefetch_close.py [--cycles 500] [--batches 25] [--data DATASET]

Each cycle builds a `model.prefetch.PrefetchedStream` (a spawned DataLoader worker, 4 batches ahead), takes
`--batches` batches from it and closes it, as every training that prefetches does at its end. A worker that
aborted (SIGABRT: "terminate called without an active exception"), exited with a code other than 0 or made
the close raise counts as a failure. Without `--data` it prepares the tests' seven short Bible books once, in
a temporary folder. The last line: `cycles N, aborts A, other failures F`; the exit status is 1 when any
cycle failed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LANGS = ["en", "fr", "es", "ru", "ar", "zh"]


def prepared(data: str | None, scratch: Path) -> str:
    if data:
        return data
    from pipelines.prepare import run_prepare
    from pipelines.runners import pipeline_options
    from tests.support.corpus import small_config

    config = small_config(scratch)
    run_prepare(config.prepare, config.data_dir, options=pipeline_options([]), resolved_config=config.to_dict())
    return str(config.data_dir)


def cycle(units, batches: int) -> list[int | None]:
    """One open/consume/close; the exit codes of the worker processes it started."""
    from model.prefetch import prefetched
    from model.stream import BatchStream
    from model.training_paths import TrainingPath

    before = set(multiprocessing.active_children())
    stream = BatchStream(
        units, LANGS, [TrainingPath(kind="1:N")], seed=0, rank=0, world=1, max_tokens=300, window_tuples=80
    )
    ahead = prefetched(stream, 4)
    workers = [p for p in multiprocessing.active_children() if p not in before]
    for _ in range(batches):
        next(ahead)
    ahead.close()
    for worker in workers:
        worker.join(10)
    return [worker.exitcode for worker in workers]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=500)
    parser.add_argument("--batches", type=int, default=25)
    parser.add_argument("--data", help="a prepared dataset (default: the tests' small one, prepared here)")
    args = parser.parse_args()

    from core.dataset import split_files
    from model.batching import shard_units

    with tempfile.TemporaryDirectory() as scratch:
        units = shard_units(split_files(prepared(args.data, Path(scratch)), "train"))
        aborts = other = 0
        start = time.monotonic()
        for i in range(1, args.cycles + 1):
            try:
                codes = cycle(units, args.batches)
            except Exception as exc:  # the trainer's SIGCHLD handler raises here when its worker dies
                other += 1
                print(f"cycle {i}: {type(exc).__name__}: {exc}", flush=True)
                continue
            if len(codes) != 1 or codes[0] != 0:
                aborts += codes.count(-6)
                other += sum(1 for c in codes if c not in (0, -6)) + (len(codes) != 1)
                print(f"cycle {i}: worker exit codes {codes}", flush=True)
            if i % 25 == 0:
                print(
                    f"{i}/{args.cycles} cycles, {aborts} aborts, {other} other failures, "
                    f"{(time.monotonic() - start) / i:.1f} s a cycle",
                    flush=True,
                )
    print(f"cycles {args.cycles}, aborts {aborts}, other failures {other}")
    return 1 if aborts or other else 0


if __name__ == "__main__":
    sys.exit(main())
