"""`core.anchor`: a folder checked, then swapped for a link or another folder before it is written into, gets
nothing: every write under a held folder goes through the folder as it was checked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core import storage
from core.boundary import BoundaryError
from core.output import OutputFolder

USERS = b"a user's file: never overwritten\n"


class Blocks:
    """A kind whose own files are its `part-*` blocks."""

    what, marker, advice = "-o", "manifest.json", "choose another folder"

    def ours(self, folder):
        return lambda entry: entry.split("/")[-1].startswith("part-") or entry in ("fr", "manifest.json")


@pytest.fixture
def checked(tmp_path) -> tuple[OutputFolder, Path, Path]:
    out = tmp_path / "out"
    (out / "fr").mkdir(parents=True)
    (out / "fr" / "part-00000.npy").write_bytes(b"ours")
    users = tmp_path / "users"
    (users / "fr").mkdir(parents=True)
    (users / "fr" / "part-00001.npy").write_bytes(USERS)
    folder = OutputFolder(str(out), Blocks())
    folder.check_replaceable()
    return folder, out, users


def _swap_for_a_link(out: Path, users: Path) -> None:
    out.rename(out.with_name("out.moved"))
    out.symlink_to(users)


def _swap_for_a_folder(out: Path, users: Path) -> None:
    out.rename(out.with_name("out.moved"))
    users.rename(out)  # the user's folder, renamed where the checked one was


def _link_below(out: Path, users: Path) -> None:
    os.rename(out / "fr", out.with_name("fr.moved"))
    (out / "fr").symlink_to(users / "fr")


@pytest.mark.parametrize("swap", [_swap_for_a_link, _swap_for_a_folder, _link_below])
@pytest.mark.parametrize("when", ["before", "during"])
def test_a_folder_swapped_after_its_check_receives_nothing(checked, swap, when):
    folder, out, users = checked
    if when == "before":  # between the check and the work
        swap(out, users)
        with pytest.raises(BoundaryError, match="replaced|not a folder"), folder.held():
            storage.write_bytes(str(out / "fr" / "part-00001.npy"), b"overwritten")
    else:  # while the work writes
        with folder.held():
            storage.write_bytes(str(out / "fr" / "part-00002.npy"), b"ours")
            swap(out, users)
            with pytest.raises(BoundaryError, match="replaced|not a folder"):
                storage.write_bytes(str(out / "fr" / "part-00001.npy"), b"overwritten")
    victim = users / "fr" / "part-00001.npy" if users.exists() else out / "fr" / "part-00001.npy"
    assert victim.read_bytes() == USERS
    assert not [p for p in victim.parent.iterdir() if ".tmp-" in p.name]


def test_writes_under_a_held_folder_make_new_files_and_folders_through_it(checked, tmp_path):
    folder, out, _ = checked
    snapshot = tmp_path / "snapshot.npy"
    os.link(out / "fr" / "part-00000.npy", snapshot)
    with folder.held():
        storage.write_bytes(str(out / "fr" / "part-00000.npy"), b"new")
        storage.write_json(str(out / "es" / "deep" / "part-00000.json"), {"rows": 1})
    assert (out / "fr" / "part-00000.npy").read_bytes() == b"new" and snapshot.read_bytes() == b"ours"
    assert storage.read_json(str(out / "es" / "deep" / "part-00000.json")) == {"rows": 1}
    storage.write_bytes(str(out / "fr" / "part-00009.npy"), b"after")  # held no more: an ordinary write
    assert (out / "fr" / "part-00009.npy").read_bytes() == b"after"
