"""Teacher embeddings for the tests of the training stream: a store (`core.teacher`) over a prepared dataset's
training shards whose vectors are a function of each tuple's key and language (mechanics only; the real
teachers are in tests/orchestration/train/test_teacher.py)."""

from __future__ import annotations

import hashlib

import numpy as np

from core import storage
from core import teacher as teacher_store
from core.dataset import Dataset


def key_vector(key: str, lang: str, dim: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.blake2b(f"{lang}/{key}".encode(), digest_size=8).digest(), "little")
    return np.random.default_rng(seed).standard_normal(dim).astype(np.float16)


def synthetic_store(
    data_dir, where, languages: list[str], dim: int = 8, *, reverse: bool = False
) -> teacher_store.TeacherStore:
    """A complete store at `where` for the dataset at `data_dir`; with `reverse`, each file's rows reversed (a
    store that is not of this dataset's rows)."""
    data = Dataset.open(data_dir)
    out = teacher_store.folder(where)
    staging = out.stage_in_place()
    files = {}
    for shard in data.files("train"):
        parquet = storage.open_parquet(shard)
        table = parquet.read(columns=["key", *[f"{lang}_text" for lang in languages]])
        keys = table.column("key").to_pylist()[:: -1 if reverse else 1]
        order = slice(None, None, -1 if reverse else 1)
        vectors, present = {}, {}
        for lang in languages:
            has = np.array([t is not None for t in table.column(f"{lang}_text").to_pylist()])[order]
            vectors[lang] = np.stack(
                [key_vector(k, lang, dim) if h else np.zeros(dim, np.float16) for k, h in zip(keys, has)]
            )
            present[lang] = has
        groups = [parquet.metadata.row_group(i).num_rows for i in range(parquet.metadata.num_row_groups)]
        name = f"train/{shard.name}"
        files[name] = teacher_store.write_shard(storage.join(where, name), keys, vectors, present, groups)
    manifest = teacher_store.TeacherManifest.of(
        files, teacher={"kind": "test"}, languages=languages, dim=dim, data=data.sha256(["train"], spm=False)
    )
    out.commit(staging, manifest.file_bytes())
    return teacher_store.TeacherStore(str(where), manifest)
