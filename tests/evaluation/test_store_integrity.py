"""Stored embeddings are verified when read (issue 71): a block's array or rows file changed after the manifest
was written is refused in one line naming the file and the manifest, locally (every file hashed once per open)
and at a URI (the bytes read hashed); the earlier formats still open. Real text: Ruth in English and French."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core import storage, transfer
from evaluation import store_writer
from evaluation.store import StoredEmbeddings, StoreError

BLOCK = 24  # tuples per block: Ruth's 85 verses in 4 blocks


@pytest.fixture
def ruth(book_lines) -> dict[str, list[str]]:
    return book_lines({"en": "k", "fr": "l"}, [8])


def write_store(folder, texts: dict[str, list[str]]) -> dict[str, np.ndarray]:
    """The tuples of `texts` (keys in verse order), with vectors of a fixed seed (the mechanics of the check,
    not their quality), written and committed as evaluate writes them; the vectors."""
    n = len(next(iter(texts.values())))
    rng = np.random.default_rng(0)
    vectors = {lang: rng.normal(size=(n, 8)).astype(np.float32) for lang in texts}
    keys = [f"ruth-{i:03d}" for i in range(n)]
    out = store_writer.output(folder)
    staging = out.stage()
    records = [
        store_writer.write_block(
            staging.local,
            keys[a : a + BLOCK],
            {lang: v[a : a + BLOCK] for lang, v in vectors.items()},
            {lang: t[a : a + BLOCK] for lang, t in texts.items()},
        )
        for a in range(0, n, BLOCK)
    ]
    out.commit(staging, store_writer.finish(staging.local, records, languages=list(texts)))
    return vectors


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message, message
    return message


def test_a_block_changed_after_the_manifest_is_refused_naming_the_file(tmp_path, ruth):
    folder = tmp_path / "emb"
    vectors = write_store(folder, ruth)
    store = StoredEmbeddings.open(folder)  # as written: it opens, and reads back what was written
    np.testing.assert_array_equal(store.rows("fr"), vectors["fr"])
    assert list(store.column("en_text")) == ruth["en"]

    # another block's vectors under part-00001's name: a valid array of the right shape, the wrong neighbours
    block = folder / "fr" / "part-00001.npy"
    original = block.read_bytes()
    np.save(block, vectors["fr"][:BLOCK][::-1].copy())
    with pytest.raises(StoreError) as refused:
        StoredEmbeddings.open(folder)
    message = one_line(refused)
    assert message.startswith(f"{block}: sha256 ") and f"in {folder / 'manifest.json'}" in message, message
    assert "damaged or was replaced" in message
    block.write_bytes(original)

    # other sentences' texts in the rows file: same keys, the texts of other verses
    rows = folder / "rows" / "part-00002.parquet"
    table = pq.read_table(rows)
    shifted = table.set_column(table.schema.get_field_index("en_text"), "en_text", table["en_text"][::-1])
    pq.write_table(shifted, rows)
    with pytest.raises(StoreError) as refused:
        StoredEmbeddings.open(folder)
    message = one_line(refused)
    assert message.startswith(f"{rows}: sha256 ") and f"in {folder / 'manifest.json'}" in message, message


def test_a_missing_rows_hash_is_refused_in_this_format_and_read_as_the_earlier_formats_wrote_it(tmp_path, ruth):
    folder = tmp_path / "emb"
    write_store(folder, ruth)
    manifest = json.loads((folder / "manifest.json").read_text())
    for block in manifest["blocks"]:
        del block["rows_sha256"]
    (folder / "manifest.json").write_text(json.dumps(manifest))  # format /3 without its rows hashes
    with pytest.raises(StoreError, match=r"manifest.json: records no sha256 of rows/part-00000.parquet"):
        StoredEmbeddings.open(folder)

    # format /2 recorded no rows hashes: read as it was, its arrays still verified
    (folder / "manifest.json").write_text(json.dumps({**manifest, "format": "interlingua-stored-embeddings/2"}))
    assert list(StoredEmbeddings.open(folder).column("fr_text")) == ruth["fr"]
    np.save(folder / "en" / "part-00003.npy", np.zeros((85 - 3 * BLOCK, 8), np.float32))
    with pytest.raises(StoreError, match=r"en/part-00003.npy: sha256 .* differs"):
        StoredEmbeddings.open(folder)

    # format /1 had no checksums at all (nor block records): read as it was
    for block in manifest["blocks"]:
        del block["sha256"]
    del manifest["columns"]
    (folder / "manifest.json").write_text(json.dumps({**manifest, "format": "interlingua-stored-embeddings/1"}))
    assert len(StoredEmbeddings.open(folder).rows("en")) == 85


def test_a_store_at_a_uri_is_verified_as_its_files_are_read(tmp_path, ruth, s3_bucket):
    """At a URI each block's array and rows file is read whole: the bytes read are hashed before they are used."""
    write_store(tmp_path / "emb", ruth)
    uri = f"{s3_bucket}/emb"
    transfer.upload_dir(tmp_path / "emb", uri, last=["manifest.json"])
    store = StoredEmbeddings.open(uri)
    assert list(store.column("fr_text", 30, 50)) == ruth["fr"][30:50]  # across two blocks' rows files
    buffer = io.BytesIO()
    np.save(buffer, np.ones((BLOCK, 8), np.float32))
    storage.write_bytes(f"{uri}/en/part-00001.npy", buffer.getvalue())
    np.testing.assert_array_equal(store.rows("en", 0, BLOCK), StoredEmbeddings.open(uri).rows("en", 0, BLOCK))
    with pytest.raises(StoreError) as refused:
        store.rows("en", 20, 30)  # touches part-00001
    message = one_line(refused)
    assert message.startswith(f"{uri}/en/part-00001.npy: sha256 ") and f"in {uri}/manifest.json" in message
    table = pa.table({"key": ["x"], "en_text": ["Naomi"], "en_hash": pa.array([1], pa.uint64())})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    storage.write_bytes(f"{uri}/rows/part-00003.parquet", sink.getvalue().to_pybytes())
    with pytest.raises(StoreError, match=r"rows/part-00003.parquet: sha256 .* differs"):
        store.column("en_text", 80, 85)
