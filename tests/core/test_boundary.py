"""The filesystem boundary (core/boundary.py): names read from manifests stay inside their folder, and no reader
or writer goes through a link. Generated over every reader of a folder someone else may have written and every
manifest field that names a file; each case checks a sentinel outside the folder and that errors never quote it.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest
from pydantic import ValidationError

from core import boundary, ownership, storage

SECRET = b"sentinel: a user's file outside every folder; never read, written or deleted\n"
ESCAPES = [
    "../outside.txt",
    "/etc/passwd",
    "a/../../outside.txt",
    "./a",
    "a//b",
    "",
    "s3://bucket/x",
    "C:/x",
    "a\\..\\b",
    "a\x00b",
    "..",
]
INSIDE = ["manifest.json", "train/part-00000.parquet", ".hidden", "en/part-1.npy", "a..b"]


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder beside the product's, holding a sentinel file and a sentinel folder."""
    folder = tmp_path / "outside"
    (folder / "dir").mkdir(parents=True)
    (folder / "secret.txt").write_bytes(SECRET)
    (folder / "dir" / "secret.txt").write_bytes(SECRET)
    return folder


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.mark.parametrize("name", ESCAPES)
def test_a_name_that_leaves_its_folder_is_refused_and_join_refuses_it_too(name):
    with pytest.raises(boundary.BoundaryError, match="not a relative path inside its folder|empty file name"):
        boundary.check_name(name)
    with pytest.raises(boundary.BoundaryError):
        storage.join("/data/set", name)
    with pytest.raises(boundary.BoundaryError):
        storage.join("s3://bucket/set", name)


@pytest.mark.parametrize("name", INSIDE)
def test_a_name_inside_its_folder_is_kept(name):
    assert boundary.check_name(name) == name
    assert storage.join("/data/set", name) == f"/data/set/{name}"


def _manifest_fields():
    """(model, a valid value, the field naming a file or a path segment, how to set it) for every manifest that
    names files: a new one belongs here, and `test_every_name_field_is_typed` finds a field left as `str`."""
    from core.dataset import ShardFile, SpmFiles
    from core.mined import MinedPair
    from core.teacher import TeacherManifest
    from evaluation.store import BlockEntry, BlockRecord
    from orchestration.embedding.export import ExportManifest

    export = dict(
        model={"dir": "/m", "model_sha256": "ab"},
        languages=["en"],
        encoders=["shared"],
        embedding_dim=8,
        quantized_ops=[],
        files={"encoder-shared.onnx": "cd"},
        versions={},
    )
    teacher = dict(
        teacher={"kind": "use"},
        languages=["en"],
        dim=8,
        data={},
        rows=1,
        files={"en/part-0.npy": {"rows": 1, "bytes": 1, "sha256": "ab"}},
    )
    mined = dict(
        file="pairs-fr-en.parquet",
        rows=1,
        sha256="ab",
        languages=["fr", "en"],
        index="flat",
        candidates=1,
        threshold=1.0,
        dropped={},
        gold=None,
        kept_per_threshold={},
    )
    return [
        (ShardFile, dict(path="train/part-0.parquet", rows=1, bytes=1, sha256="ab"), lambda v, n: {**v, "path": n}),
        (SpmFiles, dict(vocab_size=8), lambda v, n: {**v, "model": n}),
        (ExportManifest, export, lambda v, n: {**v, "files": {n: "cd"}}),
        (ExportManifest, export, lambda v, n: {**v, "encoders": [n]}),
        (TeacherManifest, teacher, lambda v, n: {**v, "files": {n: teacher["files"]["en/part-0.npy"]}}),
        (MinedPair, mined, lambda v, n: {**v, "file": n}),
        (BlockRecord, dict(name="part-00000", rows=1, sha256={}), lambda v, n: {**v, "name": n}),
        (BlockEntry, dict(name="part-00000", start=0, rows=1), lambda v, n: {**v, "name": n}),
    ]


@pytest.mark.parametrize("model, valid, setting", _manifest_fields(), ids=lambda x: getattr(x, "__name__", ""))
@pytest.mark.parametrize("name", ["../../outside.txt", "/etc/shadow", "a/../../b"])
def test_a_manifest_naming_a_file_outside_its_folder_is_not_a_manifest(model, valid, setting, name):
    fields = {k: v for k, v in valid.items() if k in model.model_fields}
    try:
        model.model_validate(fields)
    except ValidationError as exc:  # a field this model lacks: the sample is wrong, not the rule
        pytest.fail(f"the sample of {model.__name__} is not valid: {exc}")
    with pytest.raises(ValidationError, match="not a relative path inside its folder|single name"):
        model.model_validate(setting(fields, name))


def _readers():
    """(what, reader) of every folder the product reads that someone else may have written."""
    from core.dataset import Dataset
    from core.mined import read_manifest as read_mined
    from core.teacher import TeacherStore
    from evaluation.store import StoredEmbeddings
    from orchestration.adapters import model_dir
    from orchestration.embedding import export

    return [
        ("dataset", Dataset.open),
        ("model directory", model_dir.check),
        ("model files", model_dir.verify),
        ("model config", model_dir.normalization),
        ("export", export.read_manifest),
        ("embeddings", StoredEmbeddings.open),
        ("teacher", TeacherStore.open),
        ("mined", read_mined),
    ]


LINKS = {"to a file": "secret.txt", "to a folder": "dir", "dangling": "missing.txt"}


@pytest.mark.parametrize("what, reader", _readers(), ids=[w for w, _ in _readers()])
@pytest.mark.parametrize("link", list(LINKS))
@pytest.mark.parametrize("where", ["manifest.json", "config.yaml", "model.safetensors", "sub/part-0", "itself"])
def test_no_reader_reads_a_folder_holding_a_link(tmp_path, outside, what, reader, link, where):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "manifest.json").write_text("{}")  # whatever it holds: the link is refused before it is read
    before = snapshot(outside)
    target = outside / LINKS[link]
    if where == "itself":
        opened = tmp_path / "link"
        opened.symlink_to(target if link != "to a file" else outside / "dir")
    else:
        opened = folder
        (folder / where).parent.mkdir(parents=True, exist_ok=True)
        (folder / where).unlink(missing_ok=True)
        (folder / where).symlink_to(target)
    with pytest.raises(boundary.BoundaryError, match="symbolic link") as refused:
        reader(opened)
    assert SECRET.decode().strip() not in str(refused.value) and "sentinel" not in str(refused.value)
    assert snapshot(outside) == before


def test_listing_does_not_follow_links_and_ownership_refuses_a_tree_holding_one(tmp_path, outside):
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "mine.json").write_text("{}")
    (out / "sub" / "link").symlink_to(outside / "dir")
    (out / "flink").symlink_to(outside / "secret.txt")
    assert storage.entries(out) == ["flink", "mine.json", "sub", "sub/link"]  # listed, not entered
    assert storage.files(out) == ["mine.json"]
    before = snapshot(outside)
    with pytest.raises(boundary.BoundaryError, match="symbolic link"):
        ownership.check_only_ours(out, lambda e: True, what="the output", advice="move them")
    with pytest.raises(boundary.BoundaryError, match="symbolic link"):
        ownership.remove_ours(out, ["sub/link/secret.txt", "flink"])
    assert snapshot(outside) == before and (outside / "secret.txt").read_bytes() == SECRET


def test_a_write_never_goes_through_a_link_and_a_staging_link_is_not_removed(tmp_path, outside):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").symlink_to(outside / "secret.txt")
    storage.write_bytes(str(out / "report.json"), b"overwritten")  # a new file renamed over the link itself
    assert not (out / "report.json").is_symlink() and (outside / "secret.txt").read_bytes() == SECRET
    (out / "report.json").unlink()
    (out / "report.json").symlink_to(outside / "secret.txt")
    storage.write_json(str(out / "report.json"), {"a": 1})
    assert not (out / "report.json").is_symlink() and (outside / "secret.txt").read_bytes() == SECRET
    staging = tmp_path / "staging"
    staging.symlink_to(outside / "dir")
    with pytest.raises(boundary.BoundaryError):
        ownership.remove_staging(str(staging))
    assert (outside / "dir" / "secret.txt").read_bytes() == SECRET


@pytest.mark.parametrize("name", ["../escaped.bin", "model/../../escaped.bin", "/tmp/escaped.bin"])
def test_a_shipped_file_lands_only_inside_its_folder(tmp_path, name):
    with pytest.raises(boundary.BoundaryError):
        boundary.land(tmp_path / "landing", name, b"attacker's bytes")
    assert not (tmp_path / "escaped.bin").exists() and not Path("/tmp/escaped.bin").exists()


def test_a_shipped_file_never_lands_through_a_link_or_over_a_file(tmp_path, outside):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "model").symlink_to(outside / "dir")
    with pytest.raises(boundary.BoundaryError, match="not a folder of ours"):
        boundary.land(landing, "model/secret.txt", b"attacker's bytes")
    (landing / "file").symlink_to(outside / "secret.txt")
    with pytest.raises(OSError):
        boundary.land(landing, "file", b"attacker's bytes")
    assert boundary.land(landing, "ok/model.bin", b"x").read_bytes() == b"x"
    with pytest.raises(FileExistsError):
        boundary.land(landing, "ok/model.bin", b"y")
    assert (outside / "secret.txt").read_bytes() == SECRET and (outside / "dir" / "secret.txt").read_bytes() == SECRET


def test_weights_whose_dtype_is_relabelled_are_refused(tmp_path):
    """Float tensors relabelled as integers (the same bytes): loading would cast them to garbage."""
    from model.model_file import ModelFileError, load_model, save_model
    from tests.support.models import small_model

    path = tmp_path / "model.safetensors"
    save_model(small_model(), str(path))
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    key = next(k for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F32")
    header[key]["dtype"] = "I32"
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (length - len(text))
    assert len(text) == length
    path.write_bytes(data[:8] + text + data[8 + length :])
    with pytest.raises(ModelFileError, match=f"{key} is I32"):
        load_model(str(path))
