"""Only regular files (issue 71): every reader of a file a manifest (or a config) names refuses a FIFO, a device, a
directory or a name longer than the filesystem allows in one line, before any work; and a dataset whose shard holds
token ids outside its vocabulary is refused when it is verified, naming the shard, the column and the id.

Generated over the kinds and every reader x the names it reads (a dataset's shards, spm.model and manifest; an
embeddings store's arrays, rows files and manifest; a test set's files; embed's inputs). Each reader runs in a
child process killed at a deadline derived from the same read of the intact folder, so a reader that hangs (a
FIFO blocks its open until a writer comes, /dev/zero never ends) fails its test instead of hanging the suite.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import stat
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from core.dataset import Counts, DatasetError, DatasetManifest, ShardFile, SplitFiles, SpmFiles, Tally
from core.dataset_writer import manifest_bytes, shard_name, write_shard
from core.errors import UserError

LANGS = ["en", "fr"]
VOCAB = 60
KINDS = ["fifo", "char device", "directory", "over-long name"]
WHAT = {
    "fifo": "FIFO",
    "char device": "character device",
    "directory": "a directory",
    "over-long name": "longer than the filesystem allows",
}
LONG = "p" * 300  # over NAME_MAX (255 bytes) on every filesystem Linux has
MANIFEST = "manifest.json"


def tiny_dataset(folder: Path, ids: Callable[[int, str], list[int]] | None = None) -> Path:
    """A prepared dataset of 6 synthetic tuples in en/fr per split (mechanics only: verify hashes spm.model, never
    loads it), its manifest recording every file's sha256; `ids(row, lang)`: the token ids stored."""
    ids = ids or (lambda i, lang: [4 + i, 5 + len(lang)])
    rows = [
        {
            "key": f"bible:{i:04d}",
            **{f"{lang}_text": f"{lang} verse {i}" for lang in LANGS},
            **{f"{lang}_ids": ids(i, lang) for lang in LANGS},
            **{f"{lang}_len": len(ids(i, lang)) for lang in LANGS},
        }
        for i in range(6)
    ]
    splits = {}
    for split in ("train", "dev", "test"):
        name = shard_name(split, 0, 1)
        write_shard(str(folder / name), rows, LANGS)
        shard = ShardFile(path=name, rows=6, bytes=(folder / name).stat().st_size, sha256=sha(folder / name))
        splits[split] = SplitFiles(tuples=6, files=[shard])
    (folder / "spm.model").write_bytes(b"a stand-in for a sentencepiece model")
    spm = SpmFiles(vocab_size=VOCAB, sha256=sha(folder / "spm.model"))
    manifest = DatasetManifest(
        fingerprint="0" * 64, languages=LANGS, splits=splits, spm=spm, counts=Counts(tuples=Tally())
    )
    (folder / MANIFEST).write_bytes(manifest_bytes(manifest))
    return folder


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tiny_store(folder: Path) -> Path:
    """Evaluate's embeddings of 8 en/fr tuples in 2 blocks, with rows files, committed."""
    from evaluation import store_writer

    rng = np.random.default_rng(0)
    keys = [f"k{i:02d}" for i in range(8)]
    arrays = {lang: rng.normal(size=(8, 4)).astype(np.float32) for lang in LANGS}
    texts = {lang: [f"{lang} sentence {i}" for i in range(8)] for lang in LANGS}
    out = store_writer.output(folder)
    staging = out.stage()
    records = [
        store_writer.write_block(
            staging.local, keys[a:b], {k: x[a:b] for k, x in arrays.items()}, {k: t[a:b] for k, t in texts.items()}
        )
        for a, b in ((0, 5), (5, 8))
    ]
    out.commit(staging, store_writer.finish(staging.local, records, languages=LANGS))
    return folder


def spec_of(**fields):
    from orchestration.config import load_config

    return load_config(None, [f"evaluate.testsets=[{json.dumps(fields)}]"]).evaluate.testsets[0]


# --- the readers, each with the names it reads --------------------------------------------------------------
TRAIN, TEST = shard_name("train", 0, 1), shard_name("test", 0, 1)


def verify_dataset(folder: Path) -> None:
    from core.dataset import Dataset

    Dataset.open(folder).verify(("train", "dev", "test"))


def read_train_split(folder: Path) -> None:
    from core.dataset import Dataset

    Dataset.open(folder).read("train", ["key", "en_ids"])


def pinned_testset(folder: Path) -> None:
    from orchestration.evaluate.testsets import load_testset

    load_testset(spec_of(name="pinned", dataset=str(folder), split="test", fingerprint="0" * 64), LANGS)


def open_store(folder: Path) -> None:
    from evaluation.store import StoredEmbeddings

    store = StoredEmbeddings.open(folder)
    store.rows("en"), store.column("key")


def files_testset(folder: Path) -> None:
    from orchestration.evaluate.testsets import load_testset

    names = json.loads((folder / "testset.json").read_text())
    load_testset(spec_of(name="ruth", files={lang: str(folder / n) for lang, n in names.items()}), LANGS)


def embed_inputs(folder: Path) -> None:
    from orchestration.embedding.inputs import plan_blocks, resolve_inputs

    names = json.loads((folder / "inputs.json").read_text())
    plan_blocks(resolve_inputs([str(folder / name) for name in names]), column="text", block_rows=2)


def line_files(folder: Path, listing: str = "testset.json") -> Path:
    """Line-aligned en/fr files and the `listing` that names them: as a config names a test set's files
    (testset.json: {lang: name}), or -i embed's inputs (inputs.json: [name, ...])."""
    for lang in LANGS:
        (folder / f"ruth.{lang}").write_text("".join(f"{lang} verse {i}\n" for i in range(4)))
    names = {lang: f"ruth.{lang}" for lang in LANGS}
    (folder / listing).write_text(json.dumps(names if listing == "testset.json" else list(names.values())))
    return folder


def input_files(folder: Path) -> Path:
    return line_files(folder, "inputs.json")


READERS = {  # what -> (how the intact folder is made, the reader, the names it reads)
    "dataset verify": (tiny_dataset, verify_dataset, [TRAIN, TEST, "spm.model", MANIFEST]),
    "dataset split": (tiny_dataset, read_train_split, [TRAIN, MANIFEST]),
    "pinned test set": (tiny_dataset, pinned_testset, [TEST, MANIFEST]),
    "embeddings": (
        tiny_store,
        open_store,
        ["en/part-00000.npy", "fr/part-00001.npy", "rows/part-00000.parquet", MANIFEST],
    ),
    "files test set": (line_files, files_testset, ["ruth.fr"]),
    "embed inputs": (input_files, embed_inputs, ["ruth.en"]),
}
# every reader x every name it reads x every kind, but a folder named as embed's input (its files are the
# inputs) and an over-long manifest.json (its name is fixed: nothing names it)
CASES = [
    (what, name, kind)
    for what, (_, _, names) in READERS.items()
    for name in names
    for kind in KINDS
    if not (kind == "directory" and what == "embed inputs") and not (kind == "over-long name" and name == MANIFEST)
]


def plant(folder: Path, name: str, kind: str) -> str:
    """Put `kind` where `folder/name` is (an over-long name: the manifest, or the list naming it, names a file of
    a 300-byte name instead); the path the refusal must name (its start, for an over-long name)."""
    path = folder / name
    if kind == "over-long name":
        return rename_in_manifest(folder, name)
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "char device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero: its read never ends
        except PermissionError:  # not root: a link to it (refused as a link, and still no hang)
            path.symlink_to("/dev/zero")
    else:
        path.mkdir()
        (path / "inside.txt").write_text("a folder where a file should be\n")
    return str(path)


def rename_in_manifest(folder: Path, name: str) -> str:
    for listing in ("testset.json", "inputs.json"):
        if (folder / listing).exists():
            text = (folder / listing).read_text().replace(f'"{name}"', f'"{LONG}"')
            (folder / listing).write_text(text)
            if LONG in text:
                return str(folder)[:60]
    manifest = json.loads((folder / "manifest.json").read_text())
    if name == "spm.model":
        manifest["spm"]["model"] = LONG
    elif "blocks" in manifest:  # a block's name names its arrays and rows file
        block = next(b for b in manifest["blocks"] if b["name"] in name)
        block["name"] = LONG
    else:
        split = name.split("/")[0]
        manifest["splits"][split]["files"][0]["path"] = f"{split}/{LONG}.parquet"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return str(folder)[:60]


def _child(pipe, read: Callable[[Path], None], folder: Path) -> None:
    try:
        read(folder)
        pipe.send(("returned", "", ""))
    except UserError as exc:
        pipe.send(("user error", type(exc).__name__, str(exc)))
    except BaseException as exc:  # noqa: BLE001 - anything else is reported, with its traceback
        pipe.send(("other", type(exc).__name__, traceback.format_exc()))


def run_guarded(read: Callable[[Path], None], folder: Path, deadline: float) -> tuple[str, str, str]:
    """(outcome, exception type, message) of `read(folder)` in a forked child, killed after `deadline` s."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(send, read, folder), daemon=True)
    child.start()
    send.close()
    try:
        if not receive.poll(deadline):
            pytest.fail(f"the reader did not return within {deadline:.0f} s: it hangs on what it was given")
        return receive.recv()
    finally:
        child.kill()
        child.join()


@pytest.mark.parametrize("what, name, kind", CASES, ids=[f"{w}: {n}: {k}" for w, n, k in CASES])
def test_a_file_that_is_not_a_regular_file_is_refused_in_one_line_before_any_work(tmp_path, what, name, kind):
    make, read, _ = READERS[what]
    folder = tmp_path / "folder"
    folder.mkdir()
    make(folder)
    started = time.monotonic()
    read(folder)  # the intact folder reads
    deadline = 10 + 50 * (time.monotonic() - started)  # the refusal comes before that read's work
    shown = plant(folder, name, kind)
    outcome, error, message = run_guarded(read, folder, deadline)
    assert outcome == "user error", f"{outcome} {error}: {message}"  # exit 2, one line (`orchestration.cli`)
    assert "\n" not in message and shown in message, message
    if os.path.islink(folder / name):  # the fallback where mknod is not allowed
        assert "symbolic link" in message, message
    else:
        assert WHAT[kind] in message and "named in" in message, message


def test_a_link_to_a_regular_file_is_a_users_input_where_a_user_names_it(tmp_path):
    """The test set's files and embed's inputs are the user's: a link to a file is that file (a product folder
    holding a link is refused: tests/core/test_boundary.py)."""
    folder = input_files(line_files(tmp_path))
    for lang in LANGS:
        shutil.move(folder / f"ruth.{lang}", folder / f"real.{lang}")
        (folder / f"ruth.{lang}").symlink_to(folder / f"real.{lang}")
    files_testset(folder)
    embed_inputs(folder)


@pytest.mark.parametrize("bad", [VOCAB, VOCAB + 1000, -1])
def test_a_shard_holding_a_token_id_outside_the_vocabulary_is_refused_naming_it(tmp_path, bad):
    from core.dataset import Dataset

    def ids(row: int, lang: str) -> list[int]:
        return [5, bad, 6] if (row, lang) == (3, "fr") else [4 + row, 5]

    folder = tiny_dataset(tmp_path / "data", ids)  # crafted: the manifest records the crafted shard's sha256
    data = Dataset.open(folder)
    with pytest.raises(DatasetError) as refused:
        data.verify(("train", "dev"))
    message = str(refused.value)
    assert "\n" not in message and str(folder / TRAIN) in message, message
    assert f"column fr_ids holds token id {bad}, outside the vocabulary [0, {VOCAB})" in message
    data.verify(("test",), spm=False)  # a reader of the text alone: the ids are not its to check
    with pytest.raises(DatasetError, match="fr_ids holds token id"):
        data.verify(("test",), spm=False, ids=True)


def test_token_ids_at_the_ends_of_the_vocabulary_pass_and_the_highest_outside_is_named(tmp_path):
    from core.dataset import Dataset

    folder = tiny_dataset(tmp_path / "data", lambda row, lang: [0, VOCAB - 1])  # the vocabulary's ends
    Dataset.open(folder).verify(("train", "dev", "test"))
    crafted = tiny_dataset(tmp_path / "crafted", lambda row, lang: [VOCAB + row])
    with pytest.raises(DatasetError, match=f"holds token id {VOCAB + 5},"):  # the maximum of the ids read
        Dataset.open(crafted).verify(("train",))
