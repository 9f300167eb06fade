"""The commit protocol for datasets at a URI, on the local filesystem through pyarrow.fs (`file://`).

Object stores themselves (s3://, gs://) and HDFS are not tested here: these
tests run the same pyarrow.fs calls against the local disk.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core import dataset, dataset_writer, storage
from core.output import Staging
from pipelines import staging
from pipelines.prepare import run_prepare
from pipelines.runners import pipeline_options
from tests.support.corpus import disk_full_at_second_shard, small_config

LANGS = ["en", "fr"]


@pytest.fixture
def rows(book_lines) -> list[dict]:
    lines = book_lines({"en": "k", "fr": "l"}, [57])  # Philemon
    return [
        {"key": f"b:{i:02d}", "en_text": en, "fr_text": fr} for i, (en, fr) in enumerate(zip(lines["en"], lines["fr"]))
    ]


def commit(staged: Staging, data_dir: str, manifest: dataset.DatasetManifest) -> None:
    """What `prepare` does once its job has written the files (`run_prepare`'s work, then `stage.run`'s commit):
    the staged files checked against the manifest, then the dataset's folder committed with it."""
    staging.check_staged(staged, data_dir, manifest)
    dataset_writer.folder(data_dir).commit(staged, dataset_writer.manifest_bytes(manifest))


def stage_dataset(data_dir: str, rows: list[dict], tag: str) -> tuple[Staging, dataset.DatasetManifest]:
    """A staged one-shard dataset and the manifest that would commit it."""
    staged = dataset_writer.folder(data_dir).stage(tag * 16)
    name = dataset_writer.shard_name("train", 0, 1)
    dataset_writer.write_shard(str(staged.join(name)), rows, LANGS)
    storage.write_bytes(str(staged.join(dataset.SPM_MODEL)), f"model {tag}".encode())
    shard = dataset.ShardFile(
        path=staged.prefix + name,
        rows=len(rows),
        bytes=storage.size(str(staged.join(name))),
        sha256=dataset.file_sha256(str(staged.join(name))),
    )
    manifest = dataset.DatasetManifest(
        fingerprint=tag,
        languages=LANGS,
        splits={"train": dataset.SplitFiles(tuples=len(rows), files=[shard])},
        spm=dataset.SpmFiles(model=staged.prefix + dataset.SPM_MODEL, vocab_size=8),
        counts=dataset.Counts(tuples=dataset.Tally(read=len(rows), out={"train": len(rows)})),
    )
    return staged, manifest


def keys(uri: str) -> list[str]:
    return dataset.read_split(uri, "train", ["key"]).column("key").to_pylist()


def attempts(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "data").iterdir() if p.name.startswith(staging.ATTEMPT))


def test_the_manifest_is_the_commit(tmp_path, rows):
    uri = f"file://{tmp_path}/data"
    staged, manifest = stage_dataset(uri, rows[:3], "a")
    assert storage.exists(str(staged.join("train/part-00000-of-00001.parquet")))
    with pytest.raises(dataset.DatasetError, match="not a finished dataset"):
        dataset.load_manifest(uri)  # every file is there, but no manifest names them
    commit(staged, uri, manifest)
    assert dataset.load_manifest(uri) == manifest
    assert dataset.split_files(uri, "train") == [f"{uri}/{staged.prefix}train/part-00000-of-00001.parquet"]
    assert keys(uri) == ["b:00", "b:01", "b:02"]


def test_an_unfinished_run_is_never_read_and_the_next_commit_cleans_up(tmp_path, rows):
    uri = f"file://{tmp_path}/data"
    first, manifest = stage_dataset(uri, rows[:3], "a")
    commit(first, uri, manifest)
    crashed, _ = stage_dataset(uri, rows[3:9], "b")  # every file written, then the run died
    assert dataset.load_manifest(uri) == manifest
    assert keys(uri) == ["b:00", "b:01", "b:02"]
    shard = manifest.dump()["splits"]["train"]["files"][0]
    assert dataset.file_sha256(f"{uri}/{shard['path']}") == shard["sha256"]
    assert len(attempts(tmp_path)) == 2
    last, newest = stage_dataset(uri, rows[9:], "c")
    commit(last, uri, newest)
    assert keys(uri) == [r["key"] for r in rows[9:]]
    assert attempts(tmp_path) == [last.prefix.rstrip("/")]  # the previous dataset and the crashed run


class _CrashOnRename:
    """A filesystem that dies just before renaming (the manifest into place)."""

    def __init__(self, fs) -> None:
        self._fs = fs

    def __getattr__(self, name):
        return getattr(self._fs, name)

    def move(self, src: str, dest: str) -> None:
        raise OSError(5, f"crashed before renaming {src}")


def test_a_crash_while_writing_the_manifest_keeps_the_previous_one(tmp_path, rows, monkeypatch):
    uri = f"file://{tmp_path}/data"
    first, manifest = stage_dataset(uri, rows[:3], "a")
    commit(first, uri, manifest)
    second, other = stage_dataset(uri, rows[3:], "b")
    real = storage.resolve
    monkeypatch.setattr(
        storage, "resolve", lambda location: (lambda fs, path: (_CrashOnRename(fs), path))(*real(location))
    )
    with pytest.raises(OSError, match="crashed before renaming"):
        commit(second, uri, other)
    monkeypatch.undo()
    assert not list((tmp_path / "data").glob("manifest.json.tmp-*"))  # the failed write's own file removed
    assert dataset.load_manifest(uri) == manifest
    assert keys(uri) == ["b:00", "b:01", "b:02"]


def test_commit_refuses_a_manifest_that_names_a_missing_or_changed_file(tmp_path, rows):
    uri = f"file://{tmp_path}/data"
    staged, manifest = stage_dataset(uri, rows, "a")
    shard = manifest.splits["train"].files[0]
    manifest = manifest.model_copy(
        update={
            "splits": {
                "train": manifest.splits["train"].model_copy(
                    update={"files": [shard.model_copy(update={"bytes": shard.bytes + 1})]}
                )
            }
        }
    )
    with pytest.raises(dataset.DatasetError, match="nothing was committed"):
        commit(staged, uri, manifest)
    with pytest.raises(dataset.DatasetError, match="not a finished dataset"):
        dataset.load_manifest(uri)


def test_a_location_no_filesystem_knows_is_named(tmp_path):
    with pytest.raises(storage.StorageError, match=r"nosuch://bucket/data/manifest.json: .*s3://, gs://"):
        dataset.load_manifest("nosuch://bucket/data")
    with pytest.raises(storage.StorageError, match="file:// needs an absolute path"):
        dataset.load_manifest("file://relative/data")


@pytest.mark.beam
def test_prepare_to_a_uri_keeps_the_previous_dataset_through_a_crash(tmp_path, monkeypatch):
    uri = f"file://{tmp_path}/data"
    config = small_config(tmp_path)
    first = run_prepare(config.prepare, uri, options=pipeline_options([])).manifest
    changed = small_config(tmp_path, "prepare.spm.vocab_size=1500")
    real = disk_full_at_second_shard(monkeypatch)
    with pytest.raises(Exception, match="No space left on device"):
        run_prepare(changed.prepare, uri, options=pipeline_options([]))
    assert dataset.load_manifest(uri) == first
    for split in dataset.SPLITS:
        for f, location in zip(first.splits[split].files, dataset.split_files(uri, split)):
            assert dataset.file_sha256(location) == f.sha256
    assert dataset.read_split(uri, "dev").num_rows == 40
    monkeypatch.setattr(dataset_writer, "write_shard", real)
    done = run_prepare(changed.prepare, uri, options=pipeline_options([])).manifest
    assert dataset.load_manifest(uri).fingerprint == done.fingerprint != first.fingerprint
    assert attempts(tmp_path) == [done.spm.model.split("/")[0]]
    assert not list(tmp_path.glob(".data.partial-*"))  # a URI never stages beside the dataset
