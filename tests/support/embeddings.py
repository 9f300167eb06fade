"""Embeddings for the tests of search: aligned synthetic vectors (mechanics only) and a store of them."""

from __future__ import annotations

import numpy as np


def aligned(n=120, dim=16, noise=1.0, seed=3):
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n, dim)).astype(np.float32)
    return {
        lang: base + rng.normal(scale=s, size=base.shape).astype(np.float32)
        for lang, s in [("en", 0.0), ("fr", noise), ("zh", 1.5 * noise)]
    }


def store_of(folder, arrays, texts, cuts):
    """The stored embeddings of `arrays` and `texts` (blocks cut at `cuts`) at `folder / "emb"`, committed as
    evaluate commits them."""
    from evaluation import store_writer
    from evaluation.store import StoredEmbeddings

    keys = [f"k{i:05d}" for i in range(len(arrays["en"]))]
    out = store_writer.output(folder / "emb")
    staging = out.stage()
    records = [
        store_writer.write_block(
            staging.local,
            keys[a:b],
            {lang: x[a:b] for lang, x in arrays.items()},
            {lang: t[a:b] for lang, t in texts.items()},
        )
        for a, b in zip(cuts, cuts[1:])
    ]
    out.commit(staging, store_writer.finish(staging.local, records, languages=list(arrays)))
    return StoredEmbeddings.open(folder / "emb")
