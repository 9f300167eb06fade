"""Sentences/s of `interlingua embed`'s Ray Data job against a bare single-process loop, same model and text.

    .venv/bin/python benchmarks/embed.py [--sentences 31102] [--files 4] [--block-rows 2000] [--repeats 3]
                                         [--actors 1 2] [--threads 1]

Sentences: the first `--sentences` English (KJV) verses of the Bible database,
one per line in `--files` text files. The model: a model directory with the
demo's encoder (configs/bible6-cpu.yaml: shared BLSTM-max, 128/128, 256-d)
over a BPE vocabulary trained here on those verses, untrained: throughput does
not depend on the weights.

- "bare": `orchestration.embed.corpus.embed_in_process`, the `-o FILE.npy`
  path: this process reads the files line by line and embeds them with
  `SentenceEmbedder` in chunks of `--block-rows`, torch on `--threads` threads.
- "ray xA": `embed_corpus` (the job behind `interlingua embed -o DIR`) with A
  actors of `--threads` CPUs each, end to end: the planning pass (UTF-8 check,
  sha256), actor start and model load, reading, embedding, writing the blocks
  and the manifest, into an empty folder; Ray itself is started once, before.

Runs are interleaved, medians of `--repeats`; the ratios are against "bare".
Targets: ray x1 at least 0.9x of bare; xA near A x bare while cores allow.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.schema import dump_yaml  # noqa: E402
from orchestration.config import load_config  # noqa: E402
from pipelines.source_config import BibleSource  # noqa: E402
from pipelines.sources import bible_db_path  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "bible6-cpu.yaml"


def verses(n: int, text: str | None = None) -> list[str]:
    """The first n KJV verses, in Bible order (or the first n lines of `text`, e.g. those verses written out
    for a machine without the Bible database)."""
    if text:
        return Path(text).read_text(encoding="utf-8").splitlines()[:n]
    db = sqlite3.connect(f"file:{bible_db_path(BibleSource(kind='bible'))}?mode=ro", uri=True)
    rows = db.execute("SELECT vText FROM bible WHERE bbName='k' ORDER BY bNumber, cNumber, vNumber LIMIT ?", (n,))
    return [" ".join(text.split()) for (text,) in rows]


def write_files(sentences: list[str], folder: Path, files: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-len(sentences) // files)
    paths = []
    for i in range(0, len(sentences), size):
        paths.append(folder / f"part-{i // size}.txt")
        paths[-1].write_text("".join(s + "\n" for s in sentences[i : i + size]), encoding="utf-8")
    return paths


def model_dir(sentences: list[str], folder: Path) -> Path:
    """An untrained model directory with the demo's encoder and a BPE model of the sentences."""
    import torch

    from core.dataset import file_sha256
    from model.model_file import save_model
    from model.nmt import MultilingualNMT
    from orchestration.train.builders import model_args
    from pipelines.tokenizer import train_bpe

    config = load_config(CONFIG)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spm.model").write_bytes(train_bpe(sentences, config.prepare.spm))
    import sentencepiece as spm

    vocab = spm.SentencePieceProcessor(model_file=str(folder / "spm.model")).get_piece_size()
    torch.manual_seed(0)
    model = MultilingualNMT.build(model_args(config, ["en", "fr"], vocab))
    # the tokenizer's identity in the weights' file, as training writes it: the model is checked, not warned about
    save_model(
        model, str(folder / "model.safetensors"), step=0, dev_error=None, spm_sha256=file_sha256(folder / "spm.model")
    )
    (folder / "config.yaml").write_text(dump_yaml(config.to_dict()))
    return folder


def bare(model: Path, paths: list[Path], threads: int, block_rows: int) -> float:
    """Seconds of the in-process loop over the files."""
    import torch

    from orchestration.embed.corpus import embed_in_process
    from orchestration.embedding.embedder import SentenceEmbedder

    torch.set_num_threads(threads)
    start = time.perf_counter()
    embedder = SentenceEmbedder.load(model)
    embed_in_process(embedder, [str(p) for p in paths], "en", chunk=block_rows)
    return time.perf_counter() - start


def on_ray(model: Path, paths: list[Path], out: Path, actors: int, threads: int, block_rows: int) -> float:
    """Seconds of the Ray Data job into an empty folder."""
    from orchestration.embed.corpus import embed_corpus

    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    embed_corpus(
        [str(p) for p in paths],
        out,
        lang="en",
        model_dir=model,
        config={},
        block_rows=block_rows,
        actors=actors,
        cpus_per_actor=threads,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=31102)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--block-rows", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the loop and of each actor")
    parser.add_argument("--text", help="sentences from this text file (one per line) instead of the Bible database")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import ray

    work = Path(tempfile.mkdtemp(prefix="embed-bench-"))
    sentences = verses(args.sentences, args.text)
    paths = write_files(sentences, work / "in", args.files)
    model = model_dir(sentences, work / "model")
    ray.init(num_cpus=max(2, max(args.actors) * args.threads), include_dashboard=False, log_to_driver=False)
    times: dict[str, list[float]] = {"bare": [], **{f"ray x{a}": [] for a in args.actors}}
    for _ in range(args.repeats):
        times["bare"].append(bare(model, paths, args.threads, args.block_rows))
        for a in args.actors:
            times[f"ray x{a}"].append(on_ray(model, paths, work / "out", a, args.threads, args.block_rows))
    n = len(sentences)
    base = n / statistics.median(times["bare"])
    print(
        f"{n:,} sentences in {len(paths)} files, blocks of {args.block_rows:,}, {args.threads} thread(s) per "
        f"loop/actor, medians of {args.repeats}"
    )
    print(f"{'':<8} {'sentences/s':>12} {'vs bare':>8}   runs (s)")
    for name, runs in times.items():
        rate = n / statistics.median(runs)
        print(f"{name:<8} {rate:>12,.0f} {rate / base:>7.2f}x   {' '.join(f'{t:.1f}' for t in runs)}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
