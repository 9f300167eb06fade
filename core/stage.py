"""The stage runner: what every stage that writes an output does around its own work, in one place.

    result = stage.run(Stage(folder, fingerprint, read=..., fingerprint_of=..., verify=...), work, force=force)

1. **Cache answer.** The output's current manifest (`read`), if its fingerprint (`fingerprint_of`) is this run's
   and it is whole (`verify`: raises naming a damaged file), is the answer: nothing runs.
2. **Ownership.** Otherwise the folder must hold nothing but the kind's own files (`OutputFolder.check_replaceable`:
   ForeignDataError), and the stage's own refusal (`refuse(current)`: another config's output under `--force`'s
   protection) runs, both before any work.
3. **Work in staging.** `work(staging)` writes the output's files into a staging area (`OutputFolder.stage`) and
   returns its manifest (a `Manifest`: its file's bytes and the value to return).
4. **Commit.** `OutputFolder.commit`: the fence first (`core.fencing`: a run whose lease was taken over writes
   nothing), then the manifest last. Any error or interrupt before it discards the staging area; the previous
   output is untouched.

A new stage is a manifest class, a `Kind` for its folder (`core.output`) and its `work` function.

An output made anew on every run (the ONNX export, the model directory a training run exports, embed's blocks
replacing other embeddings in a local folder) has no cache answer: `always(folder)` is its stage, and `run`
gives it the same ownership check, staging (`.<name>.partial` beside a local folder), commit and discard. An
output written in place (an evaluation's report) has no staging area: its cache answer alone is
`cached(stage)`; its files are written under `OutputFolder.writing`, its record last.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from core.output import OutputFolder, Staging

M = TypeVar("M")


@dataclass(frozen=True)
class Manifest(Generic[M]):
    """What `work` made: the manifest's value and the bytes its file holds (None: the staging area holds it)."""

    value: M
    data: bytes | None


@dataclass(frozen=True)
class Stage(Generic[M]):
    """A stage's output folder and this run's fingerprint, with how to read, recognise and check its manifest."""

    folder: OutputFolder
    fingerprint: str
    read: Callable[[], M | None]  # the folder's current manifest, None when there is none
    fingerprint_of: Callable[[M], str]
    verify: Callable[[M], object] = lambda manifest: None  # raises when the output is not whole
    refuse: Callable[[M | None], object] = field(default=lambda current: None)  # raises to refuse the run


@dataclass(frozen=True)
class Outcome(Generic[M]):
    manifest: M
    skipped: bool  # the output was already this run's: nothing ran
    seconds: float


def cached(stage: Stage[M]) -> M | None:
    """The output's manifest when it is this run's and whole (`Stage.verify` raises otherwise); None when the
    stage has work to do."""
    current = stage.read()
    if current is None or stage.fingerprint_of(current) != stage.fingerprint:
        return None
    stage.verify(current)
    return current


def always(folder: OutputFolder) -> Stage[Any]:
    """The stage of an output that has no cache answer: `run` makes it anew every time (`force` or not)."""
    return Stage(folder, "", read=lambda: None, fingerprint_of=lambda manifest: "")


def run(stage: Stage[M], work: Callable[[Staging], Manifest[M]], *, force: bool = False) -> Outcome[M]:
    """Run `work` unless the output is up to date (`cached`; `force` runs it anyway), and commit what it made."""
    started = time.monotonic()
    stage.folder.settle()  # what a killed commit left
    if not force:
        current = cached(stage)
        if current is not None:
            return Outcome(current, skipped=True, seconds=time.monotonic() - started)
    stage.folder.check_replaceable()
    stage.refuse(stage.read())
    staging = stage.folder.stage(stage.fingerprint)
    try:
        with stage.folder.held(staging):  # what is written lands in the staging folder as it was made
            made = work(staging)
            stage.folder.commit(staging, made.data)
    except BaseException:
        stage.folder.discard(staging)
        raise
    return Outcome(made.value, skipped=False, seconds=time.monotonic() - started)
