"""`core.transfer`: a folder copied down from a bucket lands inside its local folder, whatever its listing says."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core import boundary, transfer

pytestmark = pytest.mark.server  # moto's S3 server

# keys a crafted bucket may list under the prefix `m/`, and the name each comes back as
CRAFTED = ["m/../../escaped", "m/../outside", "m//rooted", "m/a/../../../up", "m/./dot"]


def _put(keys: dict[str, bytes]) -> None:
    import boto3

    client = boto3.client("s3")
    for key, body in keys.items():
        client.put_object(Bucket="bucket", Key=key, Body=body)


@pytest.mark.parametrize("key", CRAFTED)
def test_a_listed_name_that_leads_out_of_the_folder_refuses_the_copy_and_writes_nothing(s3_bucket, tmp_path, key):
    """The probe's crafted bucket: keys such as `m/../../x` beside a real file. Nothing lands outside the
    target folder, a user's file of that name is not truncated, and the refusal names the listing."""
    home = tmp_path / "home" / "user"
    target = home / "cache" / "copy"
    home.mkdir(parents=True)
    places = (tmp_path / "escaped", home / "outside", tmp_path / "up", home / "rooted")
    victims = {p: b"a user's file\n" for p in places}
    for path, body in victims.items():
        path.write_bytes(body)
    _put({"m/model.safetensors": b"weights", key: b"planted"})
    before = {p for p in tmp_path.rglob("*")}
    try:
        transfer.download_dir(f"{s3_bucket}/m", target)
    except boundary.BoundaryError as exc:
        assert "listing of s3://bucket/m" in str(exc)
    else:  # the store normalized the key to a name inside the folder: then it is a file there, nothing else
        assert all(Path(p).resolve().is_relative_to(target.resolve()) for p in set(tmp_path.rglob("*")) - before)
    for path, body in victims.items():
        assert path.read_bytes() == body
    outside = {p for p in set(tmp_path.rglob("*")) - before if not p.resolve().is_relative_to(target.resolve())}
    assert outside <= {p for p in target.parents if p.is_relative_to(tmp_path)}


def test_a_cached_copy_of_a_crafted_folder_is_refused_and_leaves_no_copy(s3_bucket, tmp_path):
    _put({"m/model.safetensors": b"weights", "m/../../../../escaped": b"planted"})
    with pytest.raises(boundary.BoundaryError, match="listing of s3://bucket/m"):
        transfer.cached_copy(f"{s3_bucket}/m", "models", "k" * 16, check=lambda copy: None)
    assert not (transfer.cache_dir("models") / ("k" * 16)).exists()
    assert not [p for p in transfer.cache_dir("models").iterdir() if p.name.startswith(".k")]


def test_a_download_writes_new_files_never_into_a_shared_inode(s3_bucket, tmp_path):
    """A working copy refreshed over files a user hard-linked elsewhere: the user's links keep their bytes."""
    _put({"m/a.json": b"new\n", "m/sub/b.npy": b"new\n"})
    target = tmp_path / "work"
    (target / "sub").mkdir(parents=True)
    (target / "a.json").write_bytes(b"old\n")
    (target / "sub" / "b.npy").write_bytes(b"old\n")
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    os.link(target / "a.json", snapshot / "a.json")
    os.link(target / "sub" / "b.npy", snapshot / "b.npy")
    assert transfer.download_dir(f"{s3_bucket}/m", target) == ["a.json", "sub/b.npy"]
    assert (target / "a.json").read_bytes() == (target / "sub" / "b.npy").read_bytes() == b"new\n"
    assert (snapshot / "a.json").read_bytes() == (snapshot / "b.npy").read_bytes() == b"old\n"


def test_a_name_longer_than_the_filesystem_allows_is_refused_in_one_line(tmp_path):
    with pytest.raises(boundary.BoundaryError, match="longer than a local file name"):
        transfer.confined(tmp_path, "x" * 300, "s3://bucket/m")
    with pytest.raises(boundary.BoundaryError, match="listing of s3://bucket/m"):
        transfer.confined(tmp_path, "a/../b", "s3://bucket/m")
    assert transfer.confined(tmp_path, "a/b.npy", "s3://bucket/m") == "a/b.npy"


def test_an_upload_to_a_local_folder_writes_new_files_never_into_a_shared_inode(tmp_path):
    """Into a local filesystem (a `file://` store), every file lands as a new file renamed into place: a snapshot
    hard-linked to the file that was there keeps its bytes, and subfolders are made."""
    (tmp_path / "src" / "sub").mkdir(parents=True)
    (tmp_path / "src" / "sub" / "a.txt").write_text("new")
    (tmp_path / "src" / "m.json").write_text("{}")
    (tmp_path / "dst" / "sub").mkdir(parents=True)
    (tmp_path / "dst" / "sub" / "a.txt").write_text("old")
    os.link(tmp_path / "dst" / "sub" / "a.txt", tmp_path / "snapshot.txt")
    names = transfer.upload_dir(tmp_path / "src", f"file://{tmp_path / 'dst'}", last=["m.json"])
    assert names == ["m.json", "sub/a.txt"]
    assert (tmp_path / "dst" / "sub" / "a.txt").read_text() == "new" and (tmp_path / "dst" / "m.json").exists()
    assert (tmp_path / "snapshot.txt").read_text() == "old"
