"""How much cross-language LSI alone aligns the languages: the bag of the token vectors, no training.

    .venv/bin/python benchmarks/lsi.py [--config configs/bible6-cpu.yaml] [--dims 64 128 256] [--split test]

For each size, the token vectors of `model.lsi` (the SVD of the training
tuples' tf-idf token x tuple matrix, what `model.embed_init=lsi` starts the
encoder from) are summed, idf-weighted, over each sentence of the split, and
the similarity-search error of every ordered language pair is measured as
`interlingua evaluate` does (cosine, exact). Prints one line per size with
the SVD time and the average error. Needs the config's prepared dataset.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.dataset import load_manifest  # noqa: E402
from evaluation.xsim import average_error, error_matrix  # noqa: E402
from model.batching import ParallelCorpus  # noqa: E402
from model.lsi import cooccurrence_matrix, idf_weights, lsi_embeddings  # noqa: E402
from orchestration.config import load_config  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/bible6-cpu.yaml")
    parser.add_argument("--dims", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--split", choices=["dev", "test"], default="test")
    args = parser.parse_args()
    config = load_config(args.config)
    manifest = load_manifest(config.data_dir)
    langs, vocab = manifest.languages, manifest.spm.vocab_size
    train = ParallelCorpus.read(config.data_dir, "train", langs)
    held = ParallelCorpus.read(config.data_dir, args.split, langs)
    rows = held.complete_rows()
    matrix = cooccurrence_matrix([train.values[x] for x in langs], [train.lengths[x] for x in langs], vocab_size=vocab)
    idf = idf_weights(matrix)
    results = {}
    for dim in args.dims:
        started = time.monotonic()
        vectors = lsi_embeddings(matrix, dim=dim, seed=config.train.seed)
        seconds = time.monotonic() - started
        bags = {
            x: np.stack([(vectors[held.ids(x, r)] * idf[held.ids(x, r), None]).sum(axis=0) for r in rows])
            for x in langs
        }
        error = average_error(error_matrix(bags))
        results[dim] = error
        print(
            f"LSI {dim}-d: SVD {seconds:.1f} s, {args.split} error {100 * error:.1f} % "
            f"({len(rows)} tuples x {len(langs)} languages, {len(langs) * (len(langs) - 1)} pairs)",
            flush=True,
        )
    print(json.dumps({"split": args.split, "errors": results}))


if __name__ == "__main__":
    main()
