"""ONNX Runtime's embedding speed on a trained model, with and without its denormal floats flushed to zero.

    .venv/bin/python benchmarks/onnx_denormals.py -c configs/bible6-cpu.yaml --model runs/bible6-cpu/train/model \
        [--repeats 5] [--threads N]

torch's flush-denormal flag (`model.training.cpu_threads`) does not reach ONNX Runtime's thread pool, which has a
session setting of its own (`session.set_denormal_as_zero`, `orchestration.embedding.backends.session`). The model is
exported once (fp32 and int8, `interlingua export`'s code) into a temporary folder; each variant embeds the dev
split's sentences of every language through `SentenceEmbedder` (as `embed`, `evaluate` and `serve` do), one
warm-up pass, then `--repeats` timed passes, the variants alternating so that a change in the machine's load
falls on both. One JSON line per backend with each variant's median sentences/s and the ratio flushed / plain;
the embeddings of both variants are compared (the largest absolute difference).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-c", "--config", required=True)
    parser.add_argument("--model", required=True, help="a trained model directory of the config's dataset")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="ONNX Runtime's intra-op threads (its default)")
    args = parser.parse_args()

    import numpy as np

    from core.dataset import Dataset
    from orchestration.config import load_config
    from orchestration.embedding import backends, export
    from orchestration.embedding.embedder import SentenceEmbedder

    config = load_config(args.config, [])
    loaded = SentenceEmbedder.load(Path(args.model), backend="torch")
    table = Dataset.open(config.data_dir).read("dev", [f"{lang}_text" for lang in loaded.languages])
    dev = {lang: [t for t in table.column(f"{lang}_text").to_pylist() if t is not None] for lang in loaded.languages}
    sentences = sum(map(len, dev.values()))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "onnx"
        export.export_model(Path(args.model), folder)
        manifest = export.read_manifest(folder)
        assert manifest is not None
        for backend in export.BACKENDS:

            def embedder(flushed: bool, backend: str = backend) -> SentenceEmbedder:
                sessions = {
                    name: backends.session(
                        folder / export.file_name(name, backend), threads=args.threads, flush_denormals=flushed
                    )
                    for name in manifest.encoders
                }
                encoder = backends.OnnxEncoder(
                    sessions, languages=manifest.languages, embedding_dim=manifest.embedding_dim
                )
                return SentenceEmbedder(encoder, loaded.processor, loaded.normalizer)

            variants = {"plain": embedder(False), "flushed": embedder(True)}
            vectors = {name: {lang: e.embed(t, lang) for lang, t in dev.items()} for name, e in variants.items()}
            times: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(args.repeats):
                for name, e in variants.items():
                    start = time.perf_counter()
                    for lang, texts in dev.items():
                        e.embed(texts, lang)
                    times[name].append(time.perf_counter() - start)
            rate = {name: sentences / statistics.median(t) for name, t in times.items()}
            print(
                json.dumps(
                    {
                        "backend": backend,
                        "dev_sentences": sentences,
                        "plain_sentences_per_s": round(rate["plain"]),
                        "flushed_sentences_per_s": round(rate["flushed"]),
                        "flushed_over_plain": round(rate["flushed"] / rate["plain"], 3),
                        "max_abs_difference": float(
                            max(np.max(np.abs(vectors["plain"][lang] - vectors["flushed"][lang])) for lang in dev)
                        ),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
