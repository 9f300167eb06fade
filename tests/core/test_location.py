"""`core.location.Location`: one value for a file or folder, read, written and listed the same way in a local
folder and in a bucket (moto's S3 server)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from core import storage
from core.boundary import BoundaryError
from core.location import Location


@pytest.fixture(params=["local", pytest.param("bucket", marks=pytest.mark.server)])
def root(request, tmp_path) -> Location:
    """An empty folder: under the test's tmp_path, or a prefix of a fresh bucket."""
    if request.param == "local":
        return Location.of(tmp_path / "root")
    return Location.of(f"{request.getfixturevalue('s3_bucket')}/root")


def _tree(root: Location) -> None:
    (root / "a.txt").write_bytes(b"a")
    (root / "sub" / "b.txt").write_bytes(b"b")
    (root / "sub" / "deep" / "c.txt").write_bytes(b"c")
    (root / ".hidden").write_bytes(b"h")


# --- of, join, names -------------------------------------------------------------------------------------


def test_of_makes_a_local_path_absolute_and_keeps_a_uri_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    relative = Location.of("runs/x")
    assert relative.text == str(tmp_path / "runs" / "x")
    assert Location.of(Path("runs") / "x") == relative
    assert Location.of("s3://bucket/runs/x").text == "s3://bucket/runs/x"
    assert str(Location.of("gs://b/x/")) == "gs://b/x/"


def test_of_returns_a_location_as_it_is_and_reads_a_located_by_its_text(tmp_path):
    given = Location.of(tmp_path)
    assert Location.of(given) is given

    class Named:
        text = "s3://bucket/named"

    assert Location.of(Named()) == Location("s3://bucket/named")


@pytest.mark.parametrize(
    "given, reason",
    [
        ("ftp://host/x", "unsupported scheme"),
        ("s3://", "no bucket"),
        ("s3:///runs/x", "no bucket"),
        ("file://relative/x", "absolute path"),
        ("s3:/bucket/x", "looks like a URI"),
        ("s3:bucket", "looks like a URI"),
    ],
)
def test_of_refuses_what_names_no_filesystem_naming_what_chose_it(given, reason):
    with pytest.raises(storage.StorageError, match=reason) as refused:
        Location.of(given, "run_dir")
    assert str(refused.value).startswith(f"run_dir: {given}")


def test_join_and_slash_name_the_same_location_under_it(root):
    assert root / "sub" / "b.txt" == root.join("sub", "b.txt") == root.join("sub").join("b.txt")
    assert str(root.join("sub", "b.txt")) == str(root) + "/sub/b.txt"
    assert root.join("sub", "b.txt").name == "b.txt"
    assert root.join("sub", "b.txt").parent == root / "sub"
    assert root.join("sub", "b.txt").sibling("c.txt") == root / "sub" / "c.txt"


def test_a_uri_with_a_trailing_slash_joins_and_names_as_without():
    folder = Location.of("s3://bucket/runs/x/")
    assert folder / "a" == Location("s3://bucket/runs/x/a")
    assert folder.name == "x"
    assert folder.parent == Location("s3://bucket/runs")


@pytest.mark.parametrize("name", ["..", "../escaped", "sub/../../x", "/etc/passwd", "s3://other/x", "a//b", ""])
def test_join_refuses_a_name_that_leads_out_of_the_folder(root, name):
    with pytest.raises(BoundaryError, match="relative path inside its folder|empty file name"):
        root.join(name)
    with pytest.raises(BoundaryError):
        root.join("ok", name)


# --- what differs between filesystems ------------------------------------------------------------------------


def test_local_path_is_the_path_on_this_host_and_none_in_a_store(root, tmp_path):
    if storage.is_uri(root):
        assert root.local_path is None
        assert (root / "a").local_path is None
    else:
        assert root.local_path == tmp_path / "root"
        assert (root / "a").local_path == tmp_path / "root" / "a"


def test_only_a_local_folder_renames_in_one_step(root):
    assert (root / "out").renames is (root.local_path is not None)


def test_make_folder_makes_a_local_folder_and_its_parents_and_nothing_in_a_store(root):
    folder = root / "a" / "b"
    folder.make_folder()
    folder.make_folder()  # again: it is there
    if root.local_path is not None:
        assert folder.local_path is not None and folder.local_path.is_dir()
    else:
        assert root.entries() == []  # a prefix needs no folder: nothing written
    (folder / "f.bin").write_bytes(b"f")
    assert (folder / "f.bin").read_bytes() == b"f"


def test_arrow_names_the_filesystem_and_the_path_in_it(root):
    _tree(root)
    fs, path = (root / "sub" / "b.txt").arrow()
    assert fs.type_name == ("s3" if storage.is_uri(root) else "local")
    assert path.endswith("root/sub/b.txt")
    with fs.open_input_stream(path) as stream:
        assert stream.read() == b"b"


def test_identity_tells_one_location_from_another_and_from_one_inside_it(root):
    assert (root / "a").identity == root.join("a").identity
    assert (root / "a").identity != (root / "ab").identity
    assert (root / "a" / "b").identity.startswith((root / "a").identity + "/")
    assert not (root / "ab").identity.startswith((root / "a").identity + "/")


def test_a_uri_is_identified_without_its_trailing_slash():
    assert Location.of("s3://bucket/x/").identity == Location.of("s3://bucket/x").identity == "s3://bucket/x"


def test_a_local_location_is_identified_where_its_links_lead(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert Location.of(tmp_path / "link").identity == Location.of(real).identity
    assert Location.of(tmp_path / "link" / "file").identity == Location.of(real / "file").identity
    assert Location.of(tmp_path / "link").text == str(tmp_path / "link")  # as named: only identity resolves


# --- files ---------------------------------------------------------------------------------------------------


def test_a_file_written_is_read_back_with_its_size_and_hash(root):
    file = root / "sub" / "deep" / "data.bin"  # its folders are made
    assert not file.exists()
    data = bytes(range(256)) * 5
    file.write_bytes(data)
    assert file.exists()
    assert file.read_bytes() == data
    assert file.size() == len(data)
    assert file.sha256() == hashlib.sha256(data).hexdigest()


def test_write_and_replace_bytes_replace_a_file_whole_leaving_nothing_beside_it(root):
    file = root / "f.bin"
    file.write_bytes(b"first version, longer than the others")
    file.write_bytes(b"second")
    assert file.read_bytes() == b"second"
    file.replace_bytes(b"third")
    assert file.read_bytes() == b"third"
    assert root.files() == ["f.bin"]  # no temporary file left beside it


def test_write_json_is_read_back_as_written(root):
    value = {"name": "Genèse", "counts": [1, 2, 3], "nested": {"ok": True, "none": None}}
    (root / "m.json").write_json(value)
    assert (root / "m.json").read_json() == value
    assert "Genèse".encode() in (root / "m.json").read_bytes()  # as text, not \u escapes


def test_read_json_of_what_is_not_json_is_a_value_error(root):
    (root / "m.json").write_bytes(b"{not json")
    with pytest.raises(ValueError):
        (root / "m.json").read_json()


def test_a_missing_file_does_not_exist_and_cannot_be_read_or_deleted(root):
    missing = root / "missing.bin"
    assert not missing.exists()
    with pytest.raises(FileNotFoundError):
        missing.read_bytes()
    with pytest.raises(FileNotFoundError):
        missing.read_json()
    with pytest.raises(FileNotFoundError):
        missing.delete()
    with pytest.raises(FileNotFoundError):
        missing.open_input()


def test_delete_removes_one_file_and_leaves_the_others(root):
    _tree(root)
    (root / "sub" / "b.txt").delete()
    assert not (root / "sub" / "b.txt").exists()
    assert (root / "a.txt").read_bytes() == b"a"
    assert (root / "sub" / "deep" / "c.txt").read_bytes() == b"c"


def test_exists_is_for_files_and_is_dir_for_folders(root):
    _tree(root)
    assert (root / "a.txt").exists() and not (root / "a.txt").is_dir()
    assert (root / "sub").is_dir() and not (root / "sub").exists()
    assert root.is_dir()
    assert not (root / "nothing").is_dir() and not (root / "nothing").exists()


def test_open_input_reads_by_lines_and_seeks(root):
    (root / "lines.txt").write_bytes(b"one\ntwo\nthree\n")
    with (root / "lines.txt").open_input() as stream:
        assert stream.readline() == b"one\n"
        assert list(stream) == [b"two\n", b"three\n"]
        stream.seek(4)
        assert stream.read(3) == b"two"


def test_a_local_write_never_changes_an_inode_that_a_snapshot_shares(tmp_path):
    file = Location.of(tmp_path / "f.bin")
    file.write_bytes(b"old")
    os.link(tmp_path / "f.bin", tmp_path / "snapshot.bin")
    file.write_bytes(b"new")
    file.replace_bytes(b"newer")
    file.write_json({"newest": 1})
    assert (tmp_path / "snapshot.bin").read_bytes() == b"old"
    assert file.read_json() == {"newest": 1}


# --- folders ---------------------------------------------------------------------------------------------------


def test_entries_files_and_subdirectories_list_what_is_under_a_folder(root):
    _tree(root)
    assert root.entries() == [".hidden", "a.txt", "sub", "sub/b.txt", "sub/deep", "sub/deep/c.txt"]
    assert root.files() == [".hidden", "a.txt", "sub/b.txt", "sub/deep/c.txt"]
    assert root.subdirectories() == ["sub"]
    assert (root / "sub").entries() == ["b.txt", "deep", "deep/c.txt"]
    assert (root / "sub").subdirectories() == ["deep"]


def test_a_missing_folder_or_a_file_lists_nothing(root):
    _tree(root)
    for nothing in (root / "missing", root / "a.txt"):
        assert nothing.entries() == []
        assert nothing.files() == []
        assert nothing.subdirectories() == []


def test_a_local_link_is_listed_as_an_entry_never_followed(tmp_path):
    root = Location.of(tmp_path / "root")
    _tree(root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.txt").write_bytes(b"s")
    (tmp_path / "root" / "linked").symlink_to(elsewhere)
    (tmp_path / "root" / "file-link").symlink_to(tmp_path / "root" / "a.txt")
    assert "linked" in root.entries() and "file-link" in root.entries()
    assert not [e for e in root.entries() if "secret" in e]
    assert "file-link" not in root.files()  # a link is no file of the folder's


def test_glob_without_a_pattern_gives_a_folders_visible_files_or_the_file_itself(root):
    _tree(root)
    names = [found.name for found in root.glob()]
    assert names == ["a.txt"]  # not sub/'s files, not the dot-file
    assert [f.name for f in (root / "sub").glob()] == ["b.txt"]
    (only,) = (root / "sub" / "b.txt").glob()
    assert only.read_bytes() == b"b"


def test_glob_of_nothing_is_file_not_found(root):
    _tree(root)
    with pytest.raises(FileNotFoundError, match="no such file"):
        (root / "missing").glob()


@pytest.mark.parametrize(
    "pattern, expected",
    [
        ("*.txt", ["a.txt"]),
        ("sub/*.txt", ["sub/b.txt"]),
        ("**/*.txt", ["a.txt", "sub/b.txt", "sub/deep/c.txt"]),
        ("sub/**/c.txt", ["sub/deep/c.txt"]),
        ("?.txt", ["a.txt"]),
        ("sub/[ab].txt", ["sub/b.txt"]),
        ("*.csv", []),
    ],
)
def test_glob_with_a_pattern_matches_the_files_under_the_folder(root, pattern, expected):
    _tree(root)
    found = root.glob(pattern)
    base = Location.of(os.path.realpath(root.text)) if root.local_path is not None else root
    assert found == [base.join(*name.split("/")) for name in expected]
    assert all(f.read_bytes() == name[-5:-4].encode() for f, name in zip(found, expected))


def test_a_local_glob_leaves_out_dot_files_and_gives_real_paths(tmp_path):
    root = Location.of(tmp_path / "root")
    _tree(root)
    (tmp_path / "via").symlink_to(tmp_path / "root")
    assert Location.of(tmp_path / "via").glob("*") == [Location(os.path.realpath(tmp_path / "root" / "a.txt"))]
    assert Location.of(tmp_path / "via").glob() == [Location(os.path.realpath(tmp_path / "root" / "a.txt"))]


# --- cached_copy ---------------------------------------------------------------------------------------------


def test_a_local_folder_is_its_own_cached_copy(tmp_path):
    root = Location.of(tmp_path / "root")
    _tree(root)

    def never(*_):
        raise AssertionError("a local folder is neither keyed nor checked")

    assert root.cached_copy("models", never, never) == tmp_path / "root"


@pytest.mark.server
def test_a_store_folder_is_copied_once_per_key_and_checked_on_every_use(s3_bucket):
    root = Location.of(f"{s3_bucket}/model")
    _tree(root)
    checked: list[Path] = []
    copy = root.cached_copy("models", lambda: "key-1", checked.append)
    assert (copy / "sub" / "deep" / "c.txt").read_bytes() == b"c"
    assert (copy / "a.txt").read_bytes() == b"a"
    (root / "a.txt").write_bytes(b"changed")
    again = root.cached_copy("models", lambda: "key-1", checked.append)
    assert again == copy and (again / "a.txt").read_bytes() == b"a"  # the same key: not fetched again
    assert len(checked) == 2 and checked[-1] == copy
    fresh = root.cached_copy("models", lambda: "key-2", checked.append)
    assert fresh != copy and (fresh / "a.txt").read_bytes() == b"changed"
