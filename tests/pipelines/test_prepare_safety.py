"""`prepare` never deletes or overwrites what it did not write: a dataset directory is replaced only when it
holds a dataset and nothing else, and only that dataset's files are removed. Each case puts a sentinel file
where a user would, runs the real command on real verses and checks the sentinel is intact."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import dataset, dataset_writer, ownership
from orchestration.cli import main
from tests.support.corpus import error_line, text_source

ENGLISH, FRENCH = "k", "l"
SENTINEL = "a user's file: never delete me\n"


@pytest.fixture
def corpus(tmp_path, book_lines) -> list[str]:
    lines = book_lines({"en": ENGLISH, "fr": FRENCH}, [8])  # Ruth
    return text_source(tmp_path, lines)


def sentinels(folder: Path) -> list[Path]:
    """sentinel.txt and sub/notes.txt in `folder`, as a user might keep them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sub").mkdir(exist_ok=True)
    paths = [folder / "sentinel.txt", folder / "sub" / "notes.txt"]
    for path in paths:
        path.write_text(SENTINEL)
    return paths


def intact(paths: list[Path]) -> bool:
    return all(path.read_text() == SENTINEL for path in paths)


def test_a_dataset_dir_holding_user_files_is_refused_and_kept(tmp_path, corpus, capsys):
    target = tmp_path / "mine"
    kept = sentinels(target)
    assert main(["prepare", *corpus, f"dataset_dir={target}"]) == 2
    line = error_line(capsys)
    assert str(target) in line and "sentinel.txt" in line and "sub" in line, line
    assert intact(kept) and not (target / dataset.MANIFEST).exists()
    assert not list(tmp_path.glob(".mine.partial-*"))  # refused before any work: nothing staged


def test_the_folder_holding_the_source_corpus_is_refused_as_dataset_dir(tmp_path, corpus, capsys):
    before = {p: p.read_bytes() for p in tmp_path.glob("c.*")}
    assert main(["prepare", *corpus, f"dataset_dir={tmp_path}"]) == 2
    assert "c.en" in error_line(capsys)
    assert {p: p.read_bytes() for p in tmp_path.glob("c.*")} == before


@pytest.mark.beam
def test_user_files_inside_a_dataset_survive_force_and_are_named(tmp_path, corpus, capsys):
    assert main(["prepare", *corpus]) == 0
    data = tmp_path / "run" / "data"
    shards = sorted(p.name for p in (data / "train").iterdir())
    kept = [data / "sentinel.txt", data / "train" / "my-notes.txt"]
    for path in kept:
        path.write_text(SENTINEL)
    capsys.readouterr()
    assert main(["prepare", *corpus, "--force"]) == 2
    line = error_line(capsys)
    assert "sentinel.txt" in line and "train/my-notes.txt" in line
    assert intact(kept) and sorted(p.name for p in (data / "train").iterdir()) == sorted([*shards, "my-notes.txt"])
    for path in kept:
        path.unlink()
    assert main(["prepare", *corpus, "--force"]) == 0  # its own dataset alone: rebuilt
    assert not list(data.parent.glob(".data.*"))  # the previous one removed, staging and all


@pytest.mark.beam
def test_a_shared_dataset_dir_of_another_config_needs_force_and_names_both_fingerprints(tmp_path, corpus, capsys):
    shared = tmp_path / "shared"
    assert main(["prepare", *corpus, f"dataset_dir={shared}", "name=first"]) == 0
    first = dataset.load_manifest(shared)
    capsys.readouterr()
    other = [*corpus, f"dataset_dir={shared}", "name=second", "prepare.spm.vocab_size=250"]
    assert main(["prepare", *other]) == 2
    line = error_line(capsys)
    assert "'first'" in line and "'second'" in line and first.fingerprint[:12] in line and "--force" in line
    assert dataset.load_manifest(shared) == first  # the first config's dataset is still there, whole
    dataset.verify(shared, dataset.SPLITS)
    assert main(["prepare", *other, "--force"]) == 0
    assert dataset.load_manifest(shared).fingerprint != first.fingerprint
    assert main(["prepare", *corpus, f"dataset_dir={shared}", "name=first"]) == 2  # now it is second's
    # the same dataset under another name: shared, not replaced (up to date)
    assert main(["prepare", *corpus, f"dataset_dir={shared}", "name=third", "prepare.spm.vocab_size=250"]) == 0


@pytest.mark.beam
def test_a_changed_config_of_the_same_name_rebuilds_its_own_dataset(tmp_path, corpus):
    assert main(["prepare", *corpus]) == 0
    first = dataset.load_manifest(tmp_path / "run" / "data").fingerprint
    assert main(["prepare", *corpus, "prepare.spm.vocab_size=250"]) == 0  # scheduled retraining on new data
    assert dataset.load_manifest(tmp_path / "run" / "data").fingerprint != first


def test_a_staging_path_the_product_did_not_make_is_never_deleted(tmp_path):
    folder = tmp_path / ".data.partial-0123456789abcdef"
    kept = sentinels(folder)
    with pytest.raises(ownership.ForeignDataError, match="sentinel.txt"):
        dataset_writer.folder(tmp_path / "data").stage("0123456789abcdef" * 4)
    assert intact(kept)
    ownership.remove_staging(folder)  # not marked as the product's: nothing is removed
    assert intact(kept)


@pytest.mark.parametrize("uri", [False, True])
def test_a_manifest_that_is_not_a_dataset_is_refused(tmp_path, uri):
    folder = tmp_path / "data"
    kept = sentinels(folder)
    (folder / dataset.MANIFEST).write_text('{"format": "someone-else/1"}\n')
    location = f"file://{folder}" if uri else folder
    with pytest.raises(ownership.ForeignDataError, match="not an interlingua dataset"):
        dataset_writer.folder(location).check_replaceable()
    assert intact(kept)


def test_remove_ours_removes_listed_files_only_and_keeps_a_folder_that_gained_a_file(tmp_path):
    (tmp_path / "d" / "train").mkdir(parents=True)
    (tmp_path / "d" / "train" / "part.parquet").write_bytes(b"x")
    (tmp_path / "d" / "manifest.json").write_text("{}")
    found = ownership.check_only_ours(tmp_path / "d", lambda e: True, what="w", advice="a")
    (tmp_path / "d" / "train" / "late.txt").write_text(SENTINEL)  # appeared after the check
    ownership.remove_ours(tmp_path / "d", found)
    assert (tmp_path / "d" / "train" / "late.txt").read_text() == SENTINEL
    assert not (tmp_path / "d" / "manifest.json").exists() and not (tmp_path / "d" / "train" / "part.parquet").exists()
