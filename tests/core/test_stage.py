"""`core.stage`: the cache answer, the ownership check and refusal before any work, the work in staging and its
commit or discard, in a local folder and in a bucket (moto's S3)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core import fencing, stage
from core.location import Location
from core.output import ATTEMPT, OutputFolder, Staging
from core.ownership import ForeignDataError
from core.stage import Manifest
from tests.support.stage_kinds import MARKER, V1, V2, Damaged, Records, Work, make_stage

USERS = b"a user's notes: never deleted nor overwritten\n"


@pytest.fixture(params=["local", pytest.param("bucket", marks=pytest.mark.server)])
def folder(request, tmp_path) -> OutputFolder:
    """An output folder in the test's tmp_path, or in a fresh bucket."""
    if request.param == "local":
        return OutputFolder(tmp_path / "out", Records())
    return OutputFolder(f"{request.getfixturevalue('s3_bucket')}/out", Records())


def _never(staging: Staging) -> Manifest[Any]:
    raise AssertionError("the work ran")


def _contents(location: Location) -> dict[str, bytes]:
    return {name: location.join(name).read_bytes() for name in location.files()}


def _published(fingerprint: str, files: dict[str, bytes]) -> dict[str, bytes]:
    manifest = {"fingerprint": fingerprint, "files": sorted(files)}
    return {**files, MARKER: json.dumps(manifest).encode()}


def _staging_gone(staging: Staging) -> bool:
    if staging.root.local_path is not None:
        return not staging.root.local_path.exists()
    return not staging.root.entries()


def _first(folder: OutputFolder, fingerprint: str = "one", files: dict[str, bytes] = V1) -> None:
    outcome = stage.run(make_stage(folder, fingerprint), Work(fingerprint, files))
    assert not outcome.skipped


# --- the cache answer ----------------------------------------------------------------------------------------


def test_a_first_run_does_the_work_and_commits_its_manifest(folder):
    work = Work("one", V1)
    outcome = stage.run(make_stage(folder, "one"), work)
    assert work.calls == 1 and not outcome.skipped and outcome.seconds >= 0
    assert outcome.manifest == {"fingerprint": "one", "files": ["a.bin", "sub/b.bin"]}
    assert _contents(folder.location) == _published("one", V1)
    assert _staging_gone(work.staged[0])


def test_an_output_of_this_fingerprint_that_verifies_is_the_answer_and_nothing_runs(folder):
    _first(folder)
    verified: list[dict[str, Any]] = []
    outcome = stage.run(make_stage(folder, "one", verify=verified.append), _never)
    assert outcome.skipped
    assert outcome.manifest == verified[0] == {"fingerprint": "one", "files": ["a.bin", "sub/b.bin"]}
    assert _contents(folder.location) == _published("one", V1)


def test_an_output_of_another_fingerprint_is_made_anew_and_its_stale_files_go(folder):
    _first(folder)
    work = Work("two", V2)
    outcome = stage.run(make_stage(folder, "two"), work)
    assert work.calls == 1 and not outcome.skipped
    assert _contents(folder.location) == _published("two", V2)  # sub/b.bin removed
    assert "sub" not in folder.location.entries()


def test_a_damaged_output_of_this_fingerprint_raises_its_verify_error_and_nothing_runs(folder):
    _first(folder)
    (folder.location / "sub" / "b.bin").delete()
    before = _contents(folder.location)
    with pytest.raises(Damaged, match="sub/b.bin missing"):
        stage.run(make_stage(folder, "one"), _never)
    assert _contents(folder.location) == before


def test_force_reruns_an_output_that_is_up_to_date_without_askingverify_files(folder):
    _first(folder)
    (folder.location / "sub" / "b.bin").delete()  # damaged: verify would raise

    def refused(manifest):
        raise AssertionError("verify ran under force")

    work = Work("one", {**V1, "new.bin": b"new"})
    outcome = stage.run(make_stage(folder, "one", verify=refused), work, force=True)
    assert work.calls == 1 and not outcome.skipped
    assert _contents(folder.location) == _published("one", {**V1, "new.bin": b"new"})


def test_cached_answers_only_for_this_fingerprint_and_a_whole_output(folder):
    verified: list[dict[str, Any]] = []
    assert stage.cached(make_stage(folder, "one", verify=verified.append)) is None  # no manifest
    _first(folder)
    assert stage.cached(make_stage(folder, "two", verify=verified.append)) is None
    assert verified == []  # another fingerprint's output is not verified
    assert stage.cached(make_stage(folder, "one", verify=verified.append)) == {
        "fingerprint": "one",
        "files": ["a.bin", "sub/b.bin"],
    }
    assert len(verified) == 1
    (folder.location / "a.bin").delete()
    with pytest.raises(Damaged, match="a.bin missing"):
        stage.cached(make_stage(folder, "one"))


# --- before any work -------------------------------------------------------------------------------------------


def test_refuse_sees_the_current_manifest_and_stops_the_run_before_any_work(folder, monkeypatch):
    _first(folder)
    seen: list[Any] = []

    def refuse(current):
        seen.append(current)
        raise PermissionError("another config's output: give --force")

    staged: list[str] = []
    real_stage = folder.stage
    monkeypatch.setattr(folder, "stage", lambda fingerprint="": staged.append(fingerprint) or real_stage(fingerprint))
    with pytest.raises(PermissionError, match="--force"):
        stage.run(make_stage(folder, "two", refuse=refuse), _never)
    assert seen == [{"fingerprint": "one", "files": ["a.bin", "sub/b.bin"]}]
    assert staged == []  # no staging area was made
    assert _contents(folder.location) == _published("one", V1)
    with pytest.raises(PermissionError):  # force runs the refusal too
        stage.run(make_stage(folder, "one", refuse=refuse), _never, force=True)


def test_refuse_is_asked_with_none_when_there_is_no_output(folder):
    seen: list[Any] = []
    stage.run(make_stage(folder, "one", refuse=seen.append), Work("one", V1))
    assert seen == [None]


def test_a_folder_holding_a_users_file_is_refused_before_the_refusal_and_the_work(folder):
    _first(folder)
    (folder.location / "notes.txt").write_bytes(USERS)
    asked: list[Any] = []
    with pytest.raises(ForeignDataError, match=r"\(notes\.txt\)"):
        stage.run(make_stage(folder, "two", refuse=asked.append), _never)
    assert asked == []
    assert _contents(folder.location) == {**_published("one", V1), "notes.txt": USERS}


# --- an error in the work or the commit ------------------------------------------------------------------------


@pytest.mark.parametrize("error", [ValueError("the work failed"), KeyboardInterrupt()])
def test_an_error_in_the_work_discards_the_staging_area_and_leaves_the_previous_output(folder, error):
    _first(folder)
    work = Work("two", V2, fail=error)
    with pytest.raises(type(error)):
        stage.run(make_stage(folder, "two"), work)
    assert work.calls == 1
    assert _staging_gone(work.staged[0])
    assert _contents(folder.location) == _published("one", V1)
    assert stage.cached(make_stage(folder, "one")) is not None  # still the answer for its own fingerprint


def test_a_failed_fence_at_the_commit_discards_the_staging_area_and_writes_nothing(folder):
    _first(folder)

    def taken_over():
        raise RuntimeError("the lease was taken over")

    work = Work("two", V2)
    with fencing.fenced(taken_over), pytest.raises(RuntimeError, match="taken over"):
        stage.run(make_stage(folder, "two"), work)
    assert work.calls == 1 and _staging_gone(work.staged[0])
    assert _contents(folder.location) == _published("one", V1)


def test_a_manifest_without_bytes_is_the_one_the_work_wrote_into_staging(folder):
    def work(staging: Staging) -> Manifest[str]:
        staging.join("a.bin").write_bytes(b"a")
        staging.join(MARKER).write_bytes(json.dumps({"fingerprint": "one", "files": ["a.bin"]}).encode())
        return Manifest("made", None)

    outcome = stage.run(make_stage(folder, "one"), work)
    assert outcome.manifest == "made"
    assert folder.manifest.read_json() == {"fingerprint": "one", "files": ["a.bin"]}
    assert stage.run(make_stage(folder, "one"), _never).skipped


# --- always ----------------------------------------------------------------------------------------------------


def test_always_makes_the_output_anew_on_every_run(folder):
    first = Work("", V1)
    assert not stage.run(stage.always(folder), first).skipped
    assert _contents(folder.location) == _published("", V1)
    second = Work("", V2)
    outcome = stage.run(stage.always(folder), second)
    assert not outcome.skipped and second.calls == 1
    assert _contents(folder.location) == _published("", V2)
    third = Work("", V1)
    assert not stage.run(stage.always(folder), third, force=True).skipped and third.calls == 1
    assert stage.cached(stage.always(folder)) is None


def test_always_still_refuses_a_folder_holding_a_users_file(folder):
    (folder.location / "notes.txt").write_bytes(USERS)
    with pytest.raises(ForeignDataError, match="notes.txt"):
        stage.run(stage.always(folder), _never)
    assert _contents(folder.location) == {"notes.txt": USERS}


# --- attempts in a store -----------------------------------------------------------------------------------


@pytest.mark.server
def test_a_stage_in_a_stores_attempt_prefix_commits_by_its_manifest_and_a_failed_attempt_goes_later(s3_bucket):
    folder = OutputFolder(f"{s3_bucket}/data", Records(), attempts=True)
    first = Work("one", V1)
    stage.run(make_stage(folder, "one"), first)
    (prefix,) = folder.location.subdirectories()
    assert prefix.startswith(ATTEMPT) and first.staged[0].prefix == prefix + "/"
    assert folder.manifest.read_json()["files"] == [f"{prefix}/a.bin", f"{prefix}/sub/b.bin"]
    assert stage.run(make_stage(folder, "one"), _never).skipped
    failed = Work("two", V2, fail=ValueError("a worker died"))
    with pytest.raises(ValueError, match="worker died"):
        stage.run(make_stage(folder, "two"), failed)
    assert folder.manifest.read_json()["fingerprint"] == "one"  # the previous output, as it was
    assert len(folder.location.subdirectories()) == 2  # the failed attempt's prefix: removed by the next commit
    second = Work("two", V2)
    stage.run(make_stage(folder, "two"), second)
    assert folder.location.subdirectories() == [second.staged[0].prefix.rstrip("/")]
    assert {n: folder.location.join(n).read_bytes() for n in folder.manifest.read_json()["files"]} == {
        second.staged[0].prefix + n: data for n, data in V2.items()
    }
