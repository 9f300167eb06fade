"""A stage for the output layer's tests (`tests/core/test_stage.py`, `test_killed_commits.py`): a kind whose own
entries are its manifest and the files it names, the work that writes synthetic files, and the stage of both."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from core import ownership
from core.location import Location
from core.output import OutputFolder, Staging
from core.stage import Manifest, Stage

MARKER = "manifest.json"
V1 = {"a.bin": b"a, version 1", "sub/b.bin": b"b, version 1"}
V2 = {"a.bin": b"a, version 2", "c.bin": b"c, version 2"}


class Records:
    """A kind whose own entries are its manifest and the files it names, with their folders, and whatever is in a
    store's attempt prefix marked as staging (as a dataset's kind takes them)."""

    what, marker, advice = "-o", MARKER, "choose another folder"

    def ours(self, folder: Location):
        named = set(folder.join(MARKER).read_json()["files"]) if folder.join(MARKER).exists() else set()
        owned = ownership.with_parents(named) | {MARKER}
        staged = {name for name in folder.subdirectories() if ownership.is_staging(folder / name)}
        return lambda entry: entry in owned or entry.split("/")[0] in staged


class Damaged(Exception):
    """What `verify` raises for an output that is not whole."""


def read_manifest(folder: OutputFolder) -> dict[str, Any] | None:
    return folder.manifest.read_json() if folder.manifest.exists() else None


def verify_files(folder: OutputFolder) -> Callable[[dict[str, Any]], None]:
    def verify(manifest: dict[str, Any]) -> None:
        missing = [name for name in manifest["files"] if not folder.location.join(name).exists()]
        if missing:
            raise Damaged(f"{folder.location}: {', '.join(missing)} missing")

    return verify


def make_stage(folder: OutputFolder, fingerprint: str, **kwargs) -> Stage[dict[str, Any]]:
    kwargs.setdefault("verify", verify_files(folder))
    return Stage(
        folder, fingerprint, read=lambda: read_manifest(folder), fingerprint_of=lambda m: m["fingerprint"], **kwargs
    )


class Work:
    """A stage's work: writes `files` into the staging area, returns their manifest; counts its calls."""

    def __init__(self, fingerprint: str, files: dict[str, bytes], *, fail: BaseException | None = None):
        self.fingerprint, self.files, self.fail = fingerprint, files, fail
        self.staged: list[Staging] = []

    def __call__(self, staging: Staging) -> Manifest[dict[str, Any]]:
        self.staged.append(staging)
        for name, data in self.files.items():
            staging.join(name).write_bytes(data)
        if self.fail is not None:
            raise self.fail
        value = {"fingerprint": self.fingerprint, "files": sorted(staging.prefix + n for n in self.files)}
        return Manifest(value, json.dumps(value).encode())

    @property
    def calls(self) -> int:
        return len(self.staged)
