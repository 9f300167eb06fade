"""The Beam preparation job against a floor, measured side by side in one run.

Floor: one process that only reads the same Bible sentences, trains the same
sentencepiece model (same settings, same sample size) and encodes every
sentence. The Beam job does that plus cleaning, dedup, splits, decontamination,
accounting and Parquet writes. Target: Beam within 3x of the floor, not
counting interpreter and runner start-up (imports happen before any timing).

Runner start-up is measured, not guessed: the same job over one 13-verse book
(pipeline construction and translation, a bundle per stage, the input
fingerprint of the Bible database, manifest and publish). The last column
subtracts it, repeat by repeat; the others do not.

    python benchmarks/prepare.py [--repeats 5] [--config configs/bible6.yaml]

Each repeat runs every variant once (interleaved); the paired ratio is a
repeat's Beam time over the same repeat's floor, which cancels slow drift of
the machine.

    python benchmarks/prepare.py --dask [--repeats 3] [--config configs/bible6.yaml]

instead runs the job side by side in process and on Beam's DaskRunner against
a local dask.distributed cluster (a scheduler and 2 single-threaded worker
processes, `tests.support.local_dask`), interleaved, checks that both wrote the
same files, and prints the medians and their ratio. Cluster start-up is not
timed; each Dask run includes its client connection and graph submission.
"""

from __future__ import annotations

import argparse
import json
import logging
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import sentencepiece as spm

from orchestration.config import load_config
from pipelines import sources, tokenizer
from pipelines.prepare import run_prepare
from pipelines.runners import pipeline_options

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test tooling: tests.support.local_dask
from tests.support.local_dask import local_dask_cluster  # noqa: E402

TINY_BOOK = 63  # 2 John, 13 verses


def floor(config, sample_size: int) -> tuple[float, int]:
    """Read, train the same BPE model on a sample of the same size, encode everything."""
    started = time.perf_counter()
    source = config.prepare.sources[0]
    with sqlite3.connect(sources.bible_db_path(source)) as db:
        sentences = [
            text
            for version in source.versions.values()
            for (text,) in db.execute("SELECT vText FROM bible WHERE bbName = ?", (version,))
        ]
    step = max(len(sentences) / sample_size, 1.0)
    sample = [sentences[int(i * step)] for i in range(min(sample_size, len(sentences)))]
    proto = tokenizer.train_bpe(sample, config.prepare.spm)
    ids = spm.SentencePieceProcessor(model_proto=proto).encode(sentences)
    assert len(ids) == len(sentences)
    return time.perf_counter() - started, len(sentences)


def beam_job(config, workers: int, out: Path) -> tuple[float, int]:
    started = time.perf_counter()
    result = run_prepare(
        config.prepare, out, options=pipeline_options([], workers=workers), resolved_config=config.to_dict(), force=True
    )
    return time.perf_counter() - started, result.manifest.counts.tuples.read


def fixed_cost_config(config):
    """The same job over one 13-verse book (2 John): what it costs before and around any data."""
    source = config.prepare.sources[0].model_copy(update={"books": [TINY_BOOK]})
    split = config.prepare.split.model_copy(update={"dev_size": 2, "test_size": 2})
    prepare = config.prepare.model_copy(update={"sources": [source], "split": split})
    return config.model_copy(update={"prepare": prepare})


def dask_side_by_side(config, repeats: int, workers: int = 2) -> None:
    """The same job in process and on a local Dask cluster, interleaved; medians and their ratio."""
    names = {"in-process": "in process (FnApiRunner)", "dask": f"Dask: scheduler + {workers} worker processes"}
    times: dict[str, list[float]] = {name: [] for name in names}
    files: dict[str, dict[str, str]] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        local_dask_cluster(Path(tmp) / "dask", workers=workers, threads=1) as address,
    ):
        args = {"in-process": [], "dask": ["--runner=DaskRunner", f"--dask_client_address={address}"]}
        for rep in range(repeats):
            for name in names:
                started = time.perf_counter()
                result = run_prepare(
                    config.prepare,
                    Path(tmp) / name,
                    options=pipeline_options(args[name]),
                    resolved_config=config.to_dict(),
                    force=True,
                )
                times[name].append(time.perf_counter() - started)
                files[name] = {f.path: f.sha256 for s in result.manifest.splits.values() for f in s.files} | {
                    "spm.model": result.manifest.spm.sha256
                }
            print(f"repeat {rep + 1}: " + ", ".join(f"{k} {v[-1]:.1f}s" for k, v in times.items()), flush=True)
    same = files["dask"] == files["in-process"]
    tuples = result.manifest.counts.tuples.read
    print(
        f"\n{config.prepare.languages} Bible: {tuples:,} tuples; medians of {repeats}, interleaved; "
        f"{'identical' if same else 'DIFFERENT'} files"
    )
    for name, label in names.items():
        print(f"{label:<40} {statistics.median(times[name]):>7.1f} s")
    ratio = statistics.median(times["dask"]) / statistics.median(times["in-process"])
    print(f"{'ratio Dask / in process':<40} {ratio:>7.2f}")
    if not same:
        raise SystemExit("the Dask run wrote other files than the in-process run")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/bible6.yaml")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--dask", action="store_true", help="in process against a local Dask cluster (scheduler + 2 workers) instead"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    config = load_config(args.config)
    if args.dask:
        dask_side_by_side(config, args.repeats)
        return
    tiny = fixed_cost_config(config)
    variants = {1: "beam, 1 process", 2: "beam, 2 processes"}
    times: dict[str, list[float]] = {"floor": [], **{v: [] for v in variants.values()}}
    fixed: dict[str, list[float]] = {v: [] for v in variants.values()}
    sample_size = 0
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            # interleaved, so that machine noise hits every variant alike
            for workers, name in variants.items():
                seconds, _ = beam_job(config, workers, Path(tmp) / f"data{workers}")
                times[name].append(seconds)
                seconds, _ = beam_job(tiny, workers, Path(tmp) / f"tiny{workers}")
                fixed[name].append(seconds)
            if not sample_size:
                manifest = json.loads((Path(tmp) / "data1" / "manifest.json").read_text())
                sample_size = manifest["spm"]["sample_sentences"]
            seconds, n_sentences = floor(config, sample_size)
            times["floor"].append(seconds)
            print(
                f"repeat {rep + 1}: "
                + ", ".join(f"{k} {v[-1]:.1f}s" for k, v in times.items())
                + "; fixed cost "
                + ", ".join(f"{v[-1]:.1f}s" for v in fixed.values()),
                flush=True,
            )
    base = statistics.median(times["floor"])
    print(
        f"\n{config.prepare.languages} Bible: {n_sentences:,} sentences, BPE sample {sample_size:,}"
        f", vocabulary {config.prepare.spm.vocab_size:,}; medians of {args.repeats}"
    )
    print(
        f"{'variant':<20} {'median s':>9} {'ratio':>6} {'paired ratio':>13} {'fixed s':>8}"
        f" {'paired ratio less fixed':>24}"
    )
    for name, values in times.items():
        paired = statistics.median(v / f for v, f in zip(values, times["floor"]))
        cost = fixed.get(name, [0.0] * len(values))
        less = statistics.median((v - c) / f for v, c, f in zip(values, cost, times["floor"]))
        print(
            f"{name:<20} {statistics.median(values):>9.1f} {statistics.median(values) / base:>6.2f}"
            f" {paired:>13.2f} {statistics.median(cost):>8.1f} {less:>24.2f}"
        )


if __name__ == "__main__":
    main()
