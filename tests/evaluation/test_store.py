"""Embeddings on disk: blocks written in any order come back in key order, aligned, by row range."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from evaluation import store_writer
from evaluation.npy import NpyFile, NpyWriter
from evaluation.store import StoredEmbeddings
from evaluation.store_writer import text_hashes, write_block


def commit_store(folder, write, *, languages, meta=None):
    """The store of the blocks `write(staging folder)` writes and returns the records of, committed at `folder`
    as evaluate commits its embeddings (`store_writer.output`, `finish`)."""
    out = store_writer.output(folder)
    staging = out.stage()
    records = write(staging.local)
    out.commit(staging, store_writer.finish(staging.local, records, languages=languages, meta=meta))
    return StoredEmbeddings.open(folder)


def stored(tmp_path, n=50, dim=6, cuts=(0, 7, 8, 30, 50), seed=0):
    """n tuples in en/fr written as blocks (cut at `cuts` of a shuffled order), published."""
    rng = np.random.default_rng(seed)
    keys = [f"k{i:04d}" for i in range(n)]
    arrays = {lang: rng.normal(size=(n, dim)).astype(np.float32) for lang in ("en", "fr")}
    texts = {lang: [f"{lang} sentence {i % 9}" for i in range(n)] for lang in ("en", "fr")}

    def write(staging):  # the staging folder is tmp_path / ".emb.partial"
        records = []
        for a, b in reversed(list(zip(cuts, cuts[1:]))):  # blocks finish in any order, rows shuffled
            rows = rng.permutation(np.arange(a, b))
            records.append(
                write_block(
                    staging,
                    [keys[i] for i in rows],
                    {lang: x[rows] for lang, x in arrays.items()},
                    {lang: [t[i] for i in rows] for lang, t in texts.items()},
                )
            )
        return records

    store = commit_store(tmp_path / "emb", write, languages=["en", "fr"], meta={"model": "m"})
    return store, keys, arrays, texts


def test_blocks_come_back_in_key_order_and_aligned(tmp_path):
    store, keys, arrays, texts = stored(tmp_path)
    assert len(store) == 50 and store.starts == (0, 7, 8, 30, 50) and store.meta == {"model": "m"}
    for lang in ("en", "fr"):
        np.testing.assert_array_equal(store.rows(lang, 0, 50), arrays[lang])
        np.testing.assert_array_equal(store.rows(lang, 5, 31), arrays[lang][5:31])  # across 4 blocks
        assert store.rows(lang, 7, 7).shape == (0, 6)
        assert [start for start, _ in store.blocks(lang)] == [0, 7, 8, 30]
        np.testing.assert_array_equal(store.column(f"{lang}_hash"), text_hashes(texts[lang]))
    assert list(store.column("key")) == keys == json.loads((tmp_path / "emb" / "keys.json").read_text())
    assert list(store.column("fr_text", 29, 31)) == texts["fr"][29:31]
    assert not (tmp_path / ".emb.partial").exists()
    assert sorted(p.name for p in (tmp_path / "emb" / "en").iterdir()) == [f"part-{i:05d}.npy" for i in range(4)]
    reopened = StoredEmbeddings.open(tmp_path / "emb")
    assert reopened == store


def test_every_block_has_its_record_and_the_manifest_its_checksums(tmp_path):
    from core import storage

    store, _, _, _ = stored(tmp_path)
    folder = tmp_path / "emb"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["format"] == "interlingua-stored-embeddings/3" and manifest["languages"] == ["en", "fr"]
    assert manifest["columns"] == ["key", "en_text", "en_hash", "fr_text", "fr_hash"]
    for block in manifest["blocks"]:
        record = json.loads((folder / f"{block['name']}.json").read_text())
        assert {k: record[k] for k in ("name", "start", "rows", "sha256", "rows_sha256")} == block
        assert block["sha256"] == {
            lang: storage.sha256(folder / lang / f"{block['name']}.npy") for lang in ("en", "fr")
        }
        assert block["rows_sha256"] == storage.sha256(folder / "rows" / f"{block['name']}.parquet")
    assert sorted(p.name for p in folder.iterdir()) == [
        "en",
        "fr",
        "keys.json",
        "manifest.json",
        *(f"part-{i:05d}.json" for i in range(4)),
        "rows",
    ]


def test_a_folder_of_the_first_format_still_opens_and_is_replaced(tmp_path):
    """Evaluate's folders written before block records (format /1): read alike, and recognised as ours."""
    store, keys, arrays, _ = stored(tmp_path)
    folder = tmp_path / "emb"
    manifest = json.loads((folder / "manifest.json").read_text())
    for block in manifest["blocks"]:
        (folder / f"{block['name']}.json").unlink()
        del block["sha256"]
    del manifest["columns"]
    (folder / "manifest.json").write_text(json.dumps({**manifest, "format": "interlingua-stored-embeddings/1"}))
    old = StoredEmbeddings.open(folder)
    assert old.starts == store.starts and list(old.column("key")) == keys
    np.testing.assert_array_equal(old.rows("fr"), arrays["fr"])
    new, _, again, _ = stored(tmp_path, seed=1, cuts=(0, 50))  # publishing over it
    np.testing.assert_array_equal(new.rows("en"), again["en"])


def test_a_store_without_rows_files_says_so(tmp_path):
    from evaluation.store import NoRowsError
    from evaluation.store_writer import make_manifest, manifest_bytes, save_block

    folder = tmp_path / "vectors"
    vectors = np.arange(12, dtype=np.float32).reshape(4, 3)
    records = [
        save_block(folder, "part-00000", {"fr": vectors[:3]}),
        save_block(folder, "part-00001", {"fr": vectors[3:]}),
    ]
    (folder / "manifest.json").write_bytes(
        manifest_bytes(make_manifest(records, languages=["fr"], dim=3, dtype="float32"))
    )
    store = StoredEmbeddings.open(folder)
    np.testing.assert_array_equal(store.rows("fr"), vectors)
    assert store.starts == (0, 3, 4)
    with pytest.raises(NoRowsError, match="no column 'key'.*vectors only"):
        store.column("key")
    with pytest.raises(NoRowsError, match="no text hashes"):
        store.hashes()


def test_block_records_and_manifests_read_back_as_written(tmp_path):
    """The two files of the format, as models: what is written reads back equal, a writer's unset fields are
    left out of the file, and a file of another shape is no record or manifest (so never taken for ours)."""
    from evaluation.store import BlockRecord, StoreManifest, read_manifest, read_record
    from evaluation.store_writer import make_manifest, manifest_bytes, save_block

    folder = tmp_path / "vectors"
    record = save_block(
        folder,
        "part-00000",
        {"fr": np.ones((3, 2), np.float32)},
        index=0,
        source="a.txt",
        first_line=1,
        empty=1,
        fingerprint="fp",
    )
    on_disk = json.loads((folder / "part-00000.json").read_text())
    assert set(on_disk) == {"name", "rows", "sha256", "index", "source", "first_line", "empty", "fingerprint"}
    assert read_record(folder / "part-00000.json") == record == BlockRecord.model_validate(on_disk)
    manifest = make_manifest([record], languages=["fr"], dim=2, dtype="float32", meta={"fingerprint": "fp"})
    (folder / "manifest.json").write_bytes(manifest_bytes(manifest))
    assert read_manifest(folder) == manifest and read_manifest(folder).rows_columns() == []
    assert StoreManifest.model_validate(json.loads((folder / "manifest.json").read_text())) == manifest
    (folder / "part-00000.json").write_text(json.dumps({"name": "part-00000", "rows": 3}))  # no checksums
    (folder / "manifest.json").write_text(json.dumps({**manifest.model_dump(), "format": "someone-elses/1"}))
    assert read_record(folder / "part-00000.json") is None and read_manifest(folder) is None
    with pytest.raises(ValueError, match="manifest.json: not a stored-embeddings manifest.*format"):
        StoredEmbeddings.open(folder)


def test_publishing_again_replaces_the_folder_whole(tmp_path):
    stored(tmp_path, seed=0)
    store, _, arrays, _ = stored(tmp_path, seed=1, cuts=(0, 50))
    assert store.starts == (0, 50)
    np.testing.assert_array_equal(store.rows("en", 0, 50), arrays["en"])


def test_overlapping_blocks_are_refused(tmp_path):
    staging = tmp_path / "s"
    vectors = {"en": np.zeros((2, 3), np.float32)}
    records = [
        write_block(staging, ["a", "c"], vectors, {"en": ["x", "y"]}),
        write_block(staging, ["b", "d"], vectors, {"en": ["x", "y"]}),
    ]
    with pytest.raises(AssertionError, match="overlap"):
        store_writer.finish(staging, records, languages=["en"])


def test_text_hashes_tell_equal_texts():
    hashes = text_hashes(["Dieu est amour.", "dieu est amour.", "Dieu est amour."])
    assert hashes.dtype == np.uint64 and hashes[0] == hashes[2] != hashes[1]


def test_npy_files_are_written_and_read_by_row_range(tmp_path):
    writer = NpyWriter(tmp_path / "x.npy", (10, 3), np.int64)
    data = np.arange(30).reshape(10, 3)
    writer.write(6, data[6:])
    writer.write(0, data[:6])
    np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), data)
    read = NpyFile(tmp_path / "x.npy")
    assert read.shape == (10, 3) and len(read) == 10
    np.testing.assert_array_equal(read[3:8], data[3:8])


def test_publishing_over_a_folder_with_a_users_file_is_refused_and_keeps_it(tmp_path):
    from core import ownership

    folder = tmp_path / "embeddings"

    def staged(value: float):
        return lambda staging: [
            write_block(staging, ["a", "b"], {"en": np.full((2, 3), value, np.float32)}, {"en": ["x", "y"]})
        ]

    commit_store(folder, staged(1.0), languages=["en"])
    (folder / "en" / "notes.txt").write_text("mine")
    with pytest.raises(ownership.ForeignDataError, match="en/notes.txt"):
        commit_store(folder, staged(2.0), languages=["en"])
    assert (folder / "en" / "notes.txt").read_text() == "mine" and StoredEmbeddings.open(folder).rows("en", 0, 2)[
        0, 0
    ] == 1.0
    (folder / "en" / "notes.txt").unlink()
    commit_store(folder, staged(2.0), languages=["en"])
    assert StoredEmbeddings.open(folder).rows("en", 0, 2)[0, 0] == 2.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["embeddings"]  # no staging or old copy left


def test_an_evaluation_folder_with_a_users_file_is_refused(tmp_path):
    """Only what a record names is the product's: the state file vouches for the report, metrics.json's pairs
    for their search files, the stored embeddings' manifest for what lies under embeddings/."""
    from core import ownership
    from evaluation import report

    def replaceable(folder):
        return report.output(folder).check_replaceable()

    (tmp_path / "metrics.json").write_text('{"sentences": 2, "averages": {}, "pairs": {"en-fr": {"error": 0.5}}}')
    for name in ("search/en-fr/ids.npy", "embeddings/en/part-00000.npy"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    # no state file vouches for metrics.json: a user's, never overwritten
    with pytest.raises(ownership.ForeignDataError, match="metrics.json"):
        replaceable(tmp_path)
    (tmp_path / "state.json").write_text('{"data": "mine"}')  # nor does a JSON file the product did not write
    with pytest.raises(ownership.ForeignDataError, match="metrics.json, search and 1 more"):
        replaceable(tmp_path)
    (tmp_path / "state.json").write_text('{"fingerprint": "0f", "run_id": "r"}')
    # no manifest of stored embeddings names embeddings/en/part-00000.npy: a user's
    with pytest.raises(ownership.ForeignDataError, match="embeddings/en") as refused:
        replaceable(tmp_path)
    assert "search" not in str(refused.value) and "metrics.json" not in str(refused.value)
    shutil.rmtree(tmp_path / "embeddings" / "en")
    assert {"metrics.json", "search/en-fr/ids.npy", "embeddings"} <= set(replaceable(tmp_path))
    for name in ("search/en-fr/notes.txt", "search/de-fr/ids.npy", "summary.docx"):  # beside its files, a user's
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("mine")
        with pytest.raises(ownership.ForeignDataError, match=name.rsplit("/", 1)[0] if "de-fr" in name else name):
            replaceable(tmp_path)
        (tmp_path / name).unlink()


def test_an_evaluation_killed_after_its_report_is_rerun_over_its_own_files(tmp_path):
    """The report is recorded before it is written: a run killed before its state file leaves files the rerun
    knows for its own."""
    from evaluation.report import FILES, output, write_report

    with pytest.raises(KeyboardInterrupt), output(tmp_path).writing(list(FILES)):  # as `evaluate` writes it
        write_report(tmp_path, {("en", "fr"): 0.5, ("fr", "en"): 0.25}, {}, {"all": 0.375}, ["en", "fr"], 4)
        raise KeyboardInterrupt  # killed before its state file
    assert set(FILES) <= set(output(tmp_path).check_replaceable())
