"""`core.output.OutputFolder`: what a folder may replace, how an output is staged and committed with its manifest
last, and how the previous output and a user's files fare, in a local folder and in a bucket (moto's S3)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from core import fencing, ownership, storage, transfer
from core.boundary import BoundaryError
from core.location import Location
from core.output import ATTEMPT, OutputFolder, OverlapError, Staging, check_apart
from core.ownership import ForeignDataError

MARKER = "manifest.json"
USERS = b"a user's notes: never deleted nor overwritten\n"
V1 = {"a.bin": b"a, version 1", "sub/b.bin": b"b, version 1", "sub/deep/c.bin": b"c, version 1"}
V2 = {"a.bin": b"a, version 2", "d.bin": b"d, version 2"}


class Records:
    """A kind whose own entries are its manifest, the files the manifest names (and their folders) and what
    `OutputFolder.writing` recorded before a crash."""

    what, marker, advice = "-o", MARKER, "choose another folder"

    def ours(self, folder: Location):
        named = set(folder.join(MARKER).read_json()["files"]) if folder.join(MARKER).exists() else set()
        owned = ownership.with_parents(named | ownership.recorded_writes(folder)) | {MARKER, ownership.JOURNAL}
        return owned.__contains__


@pytest.fixture(params=["local", pytest.param("bucket", marks=pytest.mark.server)])
def root(request, tmp_path) -> Location:
    """Where the output folder goes: the test's tmp_path, or a fresh bucket."""
    if request.param == "local":
        return Location.of(tmp_path)
    return Location.of(request.getfixturevalue("s3_bucket"))


@pytest.fixture
def folder(root) -> OutputFolder:
    return OutputFolder(root / "out", Records())


def _manifest(version: int, names, prefix: str = "") -> bytes:
    return json.dumps({"version": version, "files": sorted(prefix + n for n in names)}).encode()


def _stage_files(folder: OutputFolder, files: dict[str, bytes], fingerprint: str = "f" * 64) -> Staging:
    staging = folder.stage(fingerprint)
    for name, data in files.items():
        staging.join(name).write_bytes(data)
    return staging


def _publish(folder: OutputFolder, files: dict[str, bytes], version: int) -> None:
    staging = _stage_files(folder, files)
    folder.commit(staging, _manifest(version, files, staging.prefix))


def _contents(location: Location) -> dict[str, bytes]:
    """Every file under `location`, by relative name."""
    return {name: location.join(name).read_bytes() for name in location.files()}


def _published(files: dict[str, bytes], version: int) -> dict[str, bytes]:
    return {**files, MARKER: _manifest(version, files)}


def _staging_gone(folder: OutputFolder, staging: Staging) -> bool:
    if staging.root.local_path is not None:
        return not staging.root.local_path.exists()
    return not staging.root.entries()


# --- check_replaceable -------------------------------------------------------------------------------------


def test_a_missing_folder_has_nothing_to_replace(folder):
    assert folder.check_replaceable() == []
    assert folder.manifest == folder.location / MARKER


def test_the_kinds_own_entries_are_replaceable(folder):
    _publish(folder, V1, 1)
    assert folder.check_replaceable() == ["a.bin", MARKER, "sub", "sub/b.bin", "sub/deep", "sub/deep/c.bin"]


@pytest.mark.parametrize("users", ["notes.txt", "sub/notes.txt", "mine/deep/notes.txt"])
def test_a_users_file_is_refused_by_name_and_nothing_is_touched(folder, users):
    _publish(folder, V1, 1)
    (folder.location / users).write_bytes(USERS)
    with pytest.raises(ForeignDataError) as refused:
        folder.check_replaceable()
    topmost = "mine" if users.startswith("mine/") else users  # the topmost foreign entry, not all below it
    message = str(refused.value)
    assert message.startswith(f"-o: {folder.location} holds what interlingua did not write ({topmost})")
    assert message.endswith("choose another folder")
    assert _contents(folder.location) == {**_published(V1, 1), users: USERS}


def test_more_than_three_foreign_entries_are_counted(folder):
    for name in ("u1", "u2", "u3", "u4", "u5"):
        (folder.location / name).write_bytes(USERS)
    with pytest.raises(ForeignDataError, match=r"\(u1, u2, u3 and 2 more\)"):
        folder.check_replaceable()


def test_a_file_where_the_folder_goes_is_refused(folder):
    """`ForeignDataError` ("is a file"), not a traceback, also where the folder's write record is read
    (`ownership.recorded_writes`, which `OutputFolder` adds to every kind's own entries)."""
    folder.location.write_bytes(USERS)
    with pytest.raises(ForeignDataError, match="is a file, not a directory"):
        folder.check_replaceable()
    assert folder.location.read_bytes() == USERS


def test_a_link_in_a_local_folder_is_refused(tmp_path):
    folder = OutputFolder(tmp_path / "out", Records())
    _publish(folder, V1, 1)
    (tmp_path / "elsewhere").write_bytes(USERS)
    (tmp_path / "out" / "a.bin").unlink()
    (tmp_path / "out" / "a.bin").symlink_to(tmp_path / "elsewhere")  # a name the manifest gives
    with pytest.raises(BoundaryError, match="symbolic links"):
        folder.check_replaceable()
    with pytest.raises(BoundaryError):
        _publish(folder, V2, 2)
    assert (tmp_path / "elsewhere").read_bytes() == USERS
    assert (tmp_path / "out" / MARKER).read_bytes() == _manifest(1, V1)


# --- stage, commit, discard ------------------------------------------------------------------------------------


def test_a_first_commit_makes_the_output(folder):
    staging = _stage_files(folder, V1)
    assert not folder.location.exists() and not folder.location.files()  # nothing there before the commit
    folder.commit(staging, _manifest(1, V1))
    assert _contents(folder.location) == _published(V1, 1)
    assert _staging_gone(folder, staging)


def test_the_previous_output_stays_whole_until_the_commit_then_its_stale_files_go(folder):
    _publish(folder, V1, 1)
    staging = _stage_files(folder, V2)
    staging.join("late.bin").write_bytes(b"late")  # the work goes on writing: still nothing of it shows
    assert _contents(folder.location) == _published(V1, 1)
    new = {**V2, "late.bin": b"late"}
    folder.commit(staging, _manifest(2, new))
    assert _contents(folder.location) == _published(new, 2)  # sub/b.bin and sub/deep/c.bin removed
    assert folder.location.entries() == ["a.bin", "d.bin", "late.bin", MARKER]  # their folders too
    assert _staging_gone(folder, staging)


def test_a_commit_with_no_manifest_given_takes_the_one_the_staging_area_holds(folder):
    _publish(folder, V1, 1)
    staging = _stage_files(folder, {**V2, MARKER: _manifest(2, V2)})
    folder.commit(staging, None)
    assert _contents(folder.location) == _published(V2, 2)


def test_the_staging_area_is_no_entry_of_the_folder(folder):
    _publish(folder, V1, 1)
    staging = _stage_files(folder, V2)
    assert ownership.STAGING_MARKER not in folder.location.entries()
    assert folder.check_replaceable() == ["a.bin", MARKER, "sub", "sub/b.bin", "sub/deep", "sub/deep/c.bin"]
    folder.discard(staging)


def test_a_users_file_put_in_after_staging_stops_the_commit_before_anything_moves(folder):
    _publish(folder, V1, 1)
    staging = _stage_files(folder, V2)
    (folder.location / "notes.txt").write_bytes(USERS)
    with pytest.raises(ForeignDataError, match=r"\(notes\.txt\)"):
        folder.commit(staging, _manifest(2, V2))
    assert _contents(folder.location) == {**_published(V1, 1), "notes.txt": USERS}
    folder.discard(staging)
    assert _staging_gone(folder, staging)
    assert _contents(folder.location) == {**_published(V1, 1), "notes.txt": USERS}


def test_a_commit_whose_fence_fails_writes_nothing(folder):
    _publish(folder, V1, 1)
    staging = _stage_files(folder, V2)

    def taken_over():
        raise RuntimeError("the lease was taken over")

    with fencing.fenced(taken_over), pytest.raises(RuntimeError, match="taken over"):
        folder.commit(staging, _manifest(2, V2))
    assert _contents(folder.location) == _published(V1, 1)
    folder.discard(staging)
    assert _staging_gone(folder, staging)


def test_discard_removes_the_staging_area_and_leaves_the_previous_output(folder):
    _publish(folder, V1, 1)
    staging = _stage_files(folder, V2)
    assert not _staging_gone(folder, staging)
    folder.discard(staging)
    assert _staging_gone(folder, staging)
    assert _contents(folder.location) == _published(V1, 1)
    _publish(folder, V2, 2)  # the next run stages and commits as usual
    assert _contents(folder.location) == _published(V2, 2)


def test_a_local_staging_area_is_a_marked_sibling_named_by_the_fingerprint(tmp_path):
    folder = OutputFolder(tmp_path / "out", Records())
    staging = folder.stage("0123456789abcdef" + "9" * 48)
    assert staging.local == tmp_path / ".out.partial-0123456789abcdef"
    assert ownership.is_staging(staging.root) and staging.prefix == "" and not staging.scratch
    assert folder.stage().local == tmp_path / ".out.partial"


def test_a_crashed_runs_local_staging_area_is_replaced_and_a_users_folder_of_its_name_refused(tmp_path):
    folder = OutputFolder(tmp_path / "out", Records())
    crashed = _stage_files(folder, V1, "a" * 64)  # never committed nor discarded
    again = folder.stage("a" * 64)
    assert again.root == crashed.root and again.root.files() == [ownership.STAGING_MARKER]
    folder.discard(again)
    users = tmp_path / ".out.partial-bbbbbbbbbbbbbbbb"
    users.mkdir()
    (users / "notes.txt").write_bytes(USERS)
    with pytest.raises(ForeignDataError, match="notes.txt"):
        folder.stage("b" * 64)
    assert (users / "notes.txt").read_bytes() == USERS


@pytest.mark.server
def test_a_stores_staging_area_without_attempts_is_a_local_scratch_folder(s3_bucket):
    folder = OutputFolder(f"{s3_bucket}/out", Records())
    staging = _stage_files(folder, V1)
    assert staging.scratch and staging.local.is_dir() and staging.prefix == ""
    assert Location.of(s3_bucket).entries() == []  # nothing in the store before the commit
    folder.commit(staging, _manifest(1, V1))
    assert not staging.local.exists()


def test_a_local_commit_puts_the_whole_staged_output_in_place_with_its_manifest(tmp_path, monkeypatch):
    folder = OutputFolder(tmp_path / "out", Records())
    _publish(folder, V1, 1)
    staging = _stage_files(folder, V2)
    seen: list[tuple[dict[str, bytes], dict[str, bytes]]] = []
    replace = os.replace

    def watched(src, dst, *args, **kwargs):
        if os.fspath(dst) == str(tmp_path / "out"):  # the new output goes in: what it holds, and what is there
            seen.append((_contents(Location.of(src)), _contents(folder.location)))
        return replace(src, dst, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(os, "replace", watched)
        folder.commit(staging, _manifest(2, V2))
    ((going_in, there),) = seen
    assert going_in == {**_published(V2, 2), ownership.STAGING_MARKER: going_in[ownership.STAGING_MARKER]}
    assert there == {}  # the previous output moved aside whole, in one rename
    assert _contents(folder.location) == _published(V2, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing left beside it


@pytest.mark.server
def test_a_stores_commit_removes_the_old_manifest_first_and_puts_the_new_one_last(s3_bucket, monkeypatch):
    folder = OutputFolder(f"{s3_bucket}/out", Records())
    _publish(folder, V1, 1)
    new = {**V2, "e.bin": b"e", "sub/f.bin": b"f"}
    staging = _stage_files(folder, new)
    copied: list[tuple[str, bool]] = []  # (name, whether a manifest was in the folder as it was copied)
    copy = transfer.pafs.copy_files

    def watched(source, destination, **kwargs):
        name = destination.split("/out/", 1)[1]
        copied.append((name, folder.manifest.exists()))
        return copy(source, destination, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(transfer.pafs, "copy_files", watched)
        folder.commit(staging, _manifest(2, new))
    assert sorted(name for name, _ in copied) == sorted([*new, MARKER])
    assert copied[-1] == (MARKER, False)  # the manifest last, once every file is there
    assert not [name for name, manifest in copied if manifest]  # no reader found the old one beside new files
    assert _contents(folder.location) == _published(new, 2)


@pytest.mark.server
def test_a_store_commit_interrupted_before_its_manifest_leaves_no_manifest(s3_bucket, monkeypatch):
    folder = OutputFolder(f"{s3_bucket}/out", Records())
    _publish(folder, V1, 1)
    staging = _stage_files(folder, V2)
    copy = transfer.pafs.copy_files

    def failing(source, destination, **kwargs):
        if destination.endswith("/d.bin"):
            raise OSError("the store went away")
        return copy(source, destination, **kwargs)

    with monkeypatch.context() as patched, pytest.raises(OSError, match="went away"):
        patched.setattr(transfer.pafs, "copy_files", failing)
        folder.commit(staging, _manifest(2, V2))
    folder.discard(staging)
    assert not folder.manifest.exists()  # not a finished output: no reader takes it for one
    assert folder.location.join("sub", "b.bin").read_bytes() == V1["sub/b.bin"]  # the old files stay until next


# --- attempts in a store -----------------------------------------------------------------------------------


@pytest.mark.server
def test_attempts_stage_in_a_marked_prefix_and_the_manifest_commits_it(s3_bucket):
    folder = OutputFolder(f"{s3_bucket}/out", Records(), attempts=True)
    staging = _stage_files(folder, V1, "0123456789abcdef")
    assert staging.prefix.startswith(f"{ATTEMPT}0123456789ab-") and staging.prefix.endswith("/")
    assert staging.root == folder.location / staging.prefix.rstrip("/")
    assert ownership.is_staging(staging.root) and not staging.scratch
    assert not folder.manifest.exists()
    folder.commit(staging, _manifest(1, V1, staging.prefix))
    assert folder.manifest.read_json()["files"] == sorted(staging.prefix + n for n in V1)
    assert _contents(staging.root) == {
        **V1,
        ownership.STAGING_MARKER: staging.join(ownership.STAGING_MARKER).read_bytes(),
    }
    with pytest.raises(AssertionError):  # not a local folder
        staging.local  # noqa: B018


@pytest.mark.server
def test_each_attempt_commit_removes_the_other_attempts_but_never_a_users_prefix(s3_bucket):
    folder = OutputFolder(f"{s3_bucket}/out", Records(), attempts=True)
    first = _stage_files(folder, V1)
    folder.commit(first, _manifest(1, V1, first.prefix))
    abandoned = _stage_files(folder, {"x.bin": b"x"})  # a failed run's attempt
    folder.discard(abandoned)  # left for the next commit to remove
    assert abandoned.root.files()
    (folder.location / f"{ATTEMPT}mine" / "notes.txt").write_bytes(USERS)
    assert folder.manifest.read_json()["files"] == sorted(first.prefix + n for n in V1)  # untouched
    second = _stage_files(folder, V2)
    folder.commit(second, _manifest(2, V2, second.prefix))
    assert sorted(folder.location.subdirectories()) == sorted([second.prefix.rstrip("/"), f"{ATTEMPT}mine"])
    assert (folder.location / f"{ATTEMPT}mine" / "notes.txt").read_bytes() == USERS
    assert {n: folder.location.join(n).read_bytes() for n in folder.manifest.read_json()["files"]} == {
        second.prefix + n: data for n, data in V2.items()
    }


def test_attempts_on_a_local_folder_stage_beside_it(tmp_path):
    folder = OutputFolder(tmp_path / "out", Records(), attempts=True)
    staging = folder.stage("c" * 64)
    assert staging.local == tmp_path / ".out.partial-cccccccccccccccc" and staging.prefix == ""


# --- an output staged in place ---------------------------------------------------------------------------


def test_an_output_staged_in_place_is_marked_until_its_manifest_commits_it(folder):
    staging = folder.stage_in_place()
    assert staging.root == folder.location and ownership.is_staging(folder.location)
    for name, data in V1.items():
        staging.join(name).write_bytes(data)
    assert not folder.manifest.exists()
    folder.commit(staging, _manifest(1, V1))
    assert folder.manifest.read_bytes() == _manifest(1, V1)
    assert {n: d for n, d in _contents(folder.location).items() if n != ownership.STAGING_MARKER} == _published(V1, 1)


def test_a_folder_holding_a_users_files_is_not_staged_in_place(folder):
    (folder.location / "notes.txt").write_bytes(USERS)
    with pytest.raises(ForeignDataError, match="notes.txt"):
        folder.stage_in_place()
    assert _contents(folder.location) == {"notes.txt": USERS}


# --- check_apart -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given, relation",
    [("out", "is"), ("out/", "is"), ("out/in", "holds"), ("out/in/deeper", "holds"), ("", "lies inside")],
)
def test_an_output_that_is_holds_or_lies_inside_an_input_is_refused(root, given, relation):
    parent = root / "parent"
    output = parent / "out"
    source = f"{parent}/{given}" if given else str(parent)
    with pytest.raises(OverlapError) as refused:
        OutputFolder(output, Records()).check_apart([(str(root / "elsewhere"), "--other"), (source, "--input")])
    assert str(refused.value).startswith(f"-o: {output} {relation} the input {source} (--input);")
    with pytest.raises(OverlapError, match=f" {relation} the input "):
        check_apart(output, "dataset_dir", [(source, "data_dir")])


@pytest.mark.parametrize("given", ["out2", "ou", "other/out", "outer/x"])
def test_an_output_apart_from_its_inputs_passes(root, given):
    output = root / "parent" / "out"
    check_apart(output, "-o", [(str(root / "parent" / given), "--input"), (root / "parent" / "o", "--more")])


def test_a_local_input_reached_through_a_link_is_the_output_it_leads_to(tmp_path):
    (tmp_path / "out" / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "out")
    folder = OutputFolder(tmp_path / "out", Records())
    with pytest.raises(OverlapError, match=" is the input "):
        folder.check_apart([(tmp_path / "link", "--input")])
    with pytest.raises(OverlapError, match=" holds the input "):
        folder.check_apart([(tmp_path / "link" / "sub", "--input")])


def test_an_unsupported_input_is_refused_naming_its_flag(tmp_path):
    with pytest.raises(storage.StorageError, match="--input"):
        check_apart(Location.of(tmp_path / "out"), "-o", [("ftp://host/x", "--input")])


# --- writing in place ----------------------------------------------------------------------------------------------


def _journal(folder: OutputFolder) -> Location:
    return folder.location / ownership.JOURNAL


def test_writing_records_the_names_and_the_manifest_first_and_removes_the_previous_manifest(folder):
    folder.manifest.write_bytes(_manifest(1, ["report.json"]))
    (folder.location / "report.json").write_bytes(b"old")
    with folder.writing(["report.json", "sub/pairs.tsv"]):
        assert _journal(folder).read_json() == sorted([MARKER, "report.json", "sub/pairs.tsv"])
        assert not folder.manifest.exists()  # nothing takes the folder for finished while it is written
        (folder.location / "report.json").write_bytes(b"{}")
        (folder.location / "sub" / "pairs.tsv").write_bytes(b"a\tb\n")
        folder.commit_in_place(_manifest(2, ["report.json", "sub/pairs.tsv"]))
        assert folder.manifest.read_bytes() == _manifest(2, ["report.json", "sub/pairs.tsv"])
    assert not _journal(folder).exists()
    assert ownership.recorded_writes(folder.location) == set()
    assert folder.check_replaceable() == [MARKER, "report.json", "sub", "sub/pairs.tsv"]


def test_a_crash_while_writing_leaves_the_record_for_the_rerun_and_records_add_up(folder):
    with pytest.raises(KeyboardInterrupt), folder.writing(["b.tsv", "a.tsv"]):
        (folder.location / "a.tsv").write_bytes(b"half")
        raise KeyboardInterrupt
    assert _journal(folder).read_json() == ["a.tsv", "b.tsv", MARKER]  # kept: the rerun knows a.tsv for its own
    assert not folder.manifest.exists()
    (folder.location / "notes.txt").write_bytes(USERS)
    with pytest.raises(ForeignDataError, match=r"\(notes\.txt\)"):  # the record vouches for its names only
        folder.check_replaceable()
    (folder.location / "notes.txt").delete()
    assert folder.check_replaceable() == [ownership.JOURNAL, "a.tsv"]
    with folder.writing(["c.tsv"]):
        assert _journal(folder).read_json() == ["a.tsv", "b.tsv", "c.tsv", MARKER]
        folder.commit_in_place(_manifest(1, ["a.tsv", "b.tsv", "c.tsv"]))
    assert not _journal(folder).exists()


@pytest.mark.server
def test_a_commit_in_place_copies_up_a_scratch_folder_then_writes_the_manifest(s3_bucket, tmp_path, monkeypatch):
    folder = OutputFolder(f"{s3_bucket}/out", Records())
    scratch = tmp_path / "scratch"
    for name, data in V1.items():
        (scratch / name).parent.mkdir(parents=True, exist_ok=True)
        (scratch / name).write_bytes(data)
    copied: list[tuple[str, bool]] = []  # (name, whether the manifest was there as it was copied)
    copy = transfer.pafs.copy_files

    def watched(source, destination, **kwargs):
        copied.append((destination.split("/out/", 1)[1], folder.manifest.exists()))
        return copy(source, destination, **kwargs)

    with folder.writing(list(V1)), monkeypatch.context() as patched:
        patched.setattr(transfer.pafs, "copy_files", watched)
        folder.commit_in_place(_manifest(1, V1), files_from=scratch)
    assert sorted(copied) == [(name, False) for name in sorted(V1)]
    assert _contents(folder.location) == _published(V1, 1)


def test_a_commit_in_place_whose_fence_fails_writes_nothing(folder, tmp_path):
    (tmp_path / "scratch").mkdir()
    (tmp_path / "scratch" / "a.bin").write_bytes(b"a")

    def taken_over():
        raise RuntimeError("the lease was taken over")

    with pytest.raises(RuntimeError, match="taken over"), folder.writing(["a.bin"]), fencing.fenced(taken_over):
        folder.commit_in_place(_manifest(1, ["a.bin"]), files_from=tmp_path / "scratch")
    assert folder.location.files() == [ownership.JOURNAL]  # neither the files nor the manifest


# --- write_record: an output kept in place --------------------------------------------------------------


def test_a_record_is_replaced_whole_as_a_new_file_so_a_hard_linked_snapshot_keeps_its_bytes(tmp_path):
    folder = OutputFolder(tmp_path / "out", Records())
    folder.write_record(MARKER, _manifest(1, []))
    os.link(tmp_path / "out" / MARKER, tmp_path / "snapshot.json")  # `cp -al`
    folder.write_record(MARKER, _manifest(2, []))
    assert folder.manifest.read_json()["version"] == 2
    assert json.loads((tmp_path / "snapshot.json").read_bytes())["version"] == 1
    assert sorted(os.listdir(tmp_path / "out")) == [MARKER]  # no temporary file beside it


def test_a_record_whose_fence_fails_is_not_written(folder):
    folder.write_record(MARKER, _manifest(1, []))

    def taken_over():
        raise RuntimeError("the lease was taken over")

    with fencing.fenced(taken_over), pytest.raises(RuntimeError, match="taken over"):
        folder.write_record(MARKER, _manifest(2, []))
    assert folder.manifest.read_json()["version"] == 1


def test_a_record_goes_to_the_folder_that_was_checked_not_a_link_put_in_its_place(tmp_path):
    users = tmp_path / "users"
    users.mkdir()
    folder = OutputFolder(tmp_path / "out", Records())
    folder.write_record(MARKER, _manifest(1, []))
    assert folder.check_replaceable() == [MARKER]
    os.rename(tmp_path / "out", tmp_path / "elsewhere")
    os.symlink(users, tmp_path / "out")  # swapped after the check
    with pytest.raises(BoundaryError, match="replaced"):
        folder.write_record(MARKER, _manifest(2, []))
    assert list(users.iterdir()) == []


def test_a_record_the_kind_does_not_own_is_never_written(folder):
    with pytest.raises(AssertionError, match="notes.txt"):
        folder.write_record("notes.txt", b"")
    assert not folder.location.exists() or "notes.txt" not in folder.location.files()


def test_repr_names_the_folder_and_its_kind(tmp_path):
    assert repr(OutputFolder(tmp_path / "out", Records())) == f"OutputFolder({tmp_path / 'out'}, Records)"


def test_a_staging_area_joins_under_its_root(tmp_path):
    staging = Staging(Location.of(tmp_path))
    assert staging.join("a") == Location.of(tmp_path / "a")
    assert staging.local == Path(tmp_path)
