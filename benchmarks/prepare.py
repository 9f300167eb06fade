"""The Beam preparation job against a floor, measured side by side in one run.

Floor: one process that only reads the same Bible sentences, trains the same
sentencepiece model (same settings, same sample size) and encodes every
sentence. The Beam job does that plus cleaning, dedup, splits, decontamination,
accounting and Parquet writes. Target: Beam within 3x of the floor, not
counting interpreter and runner start-up (imports happen before any timing).

    python benchmarks/prepare.py [--repeats 3] [--config configs/bible6.yaml]
"""
from __future__ import annotations

import argparse
import json
import logging
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import sentencepiece as spm

from orchestration.config import load_config
from pipelines import sources, tokenizer
from pipelines.prepare import pipeline_options, run_prepare


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
    result = run_prepare(config.prepare, out, options=pipeline_options([], workers=workers),
                         resolved_config=config.to_dict(), force=True)
    return time.perf_counter() - started, result.manifest["counts"]["tuples"]["in"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/bible6.yaml")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    config = load_config(args.config)
    times: dict[str, list[float]] = {"floor": [], "beam, 1 process": [], "beam, 2 processes": []}
    sample_size = 0
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            # interleaved, so that machine noise hits every variant alike
            for workers in (1, 2):
                seconds, _ = beam_job(config, workers, Path(tmp) / f"data{workers}")
                times[f"beam, {workers} process{'es' if workers > 1 else ''}"].append(seconds)
            if not sample_size:
                manifest = json.loads((Path(tmp) / "data1" / "manifest.json").read_text())
                sample_size = _sample_size(manifest, config)
            seconds, n_sentences = floor(config, sample_size)
            times["floor"].append(seconds)
            print(f"repeat {rep + 1}: " + ", ".join(f"{k} {v[-1]:.1f}s" for k, v in times.items()),
                  flush=True)
    base = statistics.median(times["floor"])
    print(f"\n{config.prepare.languages} Bible: {n_sentences:,} sentences, BPE sample {sample_size:,}"
          f", vocabulary {config.prepare.spm.vocab_size:,}; medians of {args.repeats}")
    print(f"{'variant':<20} {'median s':>9} {'ratio to floor':>15}")
    for name, values in times.items():
        print(f"{name:<20} {statistics.median(values):>9.1f} {statistics.median(values) / base:>15.2f}")


def _sample_size(manifest: dict, config) -> int:
    """The number of sentences the Beam job's BPE sample held (expected from the rates)."""
    counts = {lang: sum(b["out"].values()) for lang, b in manifest["counts"]["sentences"].items()}
    rates = tokenizer.sampling_rates(counts, config.prepare.spm)
    return round(sum(rates[lang] * n for lang, n in counts.items()))


if __name__ == "__main__":
    main()
