"""The output layer: every folder the product writes is an `OutputFolder` of one `Kind`, and this is the one
place that checks what it may replace, stages, commits and records what it writes.

A kind says three things: which entries of its folder are its own (read from its manifest or records), which
file is written last (its manifest: a folder without it is not a finished output), and what to tell a user
whose folder holds anything else. The folder does the rest, the same way for every kind:

- `check_replaceable()`: the folder's entries once every one is the kind's own; `ownership.ForeignDataError`
  naming the others otherwise (nothing is replaced, deleted or written into), `boundary.BoundaryError` for a
  link anywhere in it.
- `stage()`, `commit()`, `discard()`: the whole output is built in a staging area and committed with its
  manifest last, once it is whole; until then the previous output stays as it was.
    - On a local disk the staging area is a marked sibling folder (`.<name>.partial[-<fingerprint>]`) and the
      commit two renames (`ownership.swap_in`): then the previous output's own entries are removed.
    - In a store there is no rename. `attempts=True` (the dataset): the staging area is a fresh marked prefix
      `attempt-<fingerprint>-<time>-<id>/` inside the folder, the manifest at the folder's root names the
      files under it, and the commit, one PUT of the manifest, is atomic; the other attempt prefixes go after.
      Needed where many workers write the files straight into the store (Beam's) and readers follow the
      manifest's paths. Otherwise the staging area is a local scratch folder and the commit removes the
      previous manifest first, copies the files up and the manifest last (readers look for fixed names: a
      model directory's `model.safetensors`), then the previous output's files that the new one lacks.
- `stage_in_place()`: a content-addressed output that is never replaced (the teacher's vectors) is built in
  its own folder, marked as staging, and committed by its manifest.
- `write_record(name, data)`: for an output a long run keeps in place and resumes (a training directory), its
  records (`run.json`, the run's config) replaced whole, one at a time, fenced, through the folder as checked.
- `writing(names)`, `commit_in_place(manifest)`: for outputs written in place (mined pairs, embed's blocks in
  their own folder, which a killed run resumes from), the names about to be written are recorded first
  (`ownership.begin_writes`) and the previous manifest removed, so that a rerun after a crash knows them for the
  product's and nothing takes the folder for finished; the commit is fenced, writes the manifest last, and the
  record is forgotten once the manifest names them.

Every commit first calls `fencing.check()`: a run whose lease another host took over writes nothing more.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from core import anchor, fencing, ownership, storage, transfer
from core.errors import UserError
from core.location import Location

ATTEMPT = "attempt-"  # a store's staging prefix inside the folder (`attempts=True`; `core.dataset.ATTEMPT`)


class OverlapError(UserError, ValueError):
    """An output that is, holds or lies inside one of the command's inputs: refused before any work (exit 2)."""


def check_apart(output: Location, what: str, inputs: Iterable[tuple[storage.Where, str]]) -> None:
    """OverlapError naming both when `output` (the folder `what` names) equals, holds or lies inside one of
    `inputs` ((location, the key or flag that names it)), compared by resolved identity: a command never
    writes over what it reads, nor reads what it writes."""
    out = output.identity
    for given, named in inputs:
        source = Location.of(given, named).identity
        if source == out:
            relation = "is"
        elif source.startswith(out.rstrip("/") + "/"):
            relation = "holds"
        elif out.startswith(source.rstrip("/") + "/"):
            relation = "lies inside"
        else:
            continue
        raise OverlapError(
            f"{what}: {output} {relation} the input {given} ({named}); interlingua never writes over what it "
            f"reads: give {what} a folder apart from the inputs"
        )


class Kind(Protocol):
    """What an output kind tells the output layer."""

    what: str  # how messages name the folder: its key or flag ("dataset_dir", "-o")
    marker: str  # the file written last: the manifest
    advice: str  # what a user whose folder holds other files should do

    def ours(self, folder: Location) -> Callable[[str], bool]:
        """Whether an entry of `folder` (a '/'-separated relative path) is this kind's own, by what the folder's
        manifest and records say."""
        ...


@dataclass(frozen=True)
class Staging:
    """Where a run builds an output before its commit: `root` holds the files; `prefix` is how the manifest
    names what is under it, relative to the output folder ("" except for a store's attempt prefix)."""

    root: Location
    prefix: str = ""
    scratch: bool = False  # a local scratch folder for a store's output, copied up by the commit

    def join(self, name: str) -> Location:
        return self.root.join(name)

    @property
    def local(self) -> Path:
        """The staging folder on this host; AssertionError for an attempt prefix in a store."""
        path = self.root.local_path
        assert path is not None, f"{self.root} is not a local folder"
        return path


class OutputFolder:
    """An output of one kind at one location (see the module's docstring)."""

    def __init__(self, location: storage.Where, kind: Kind, *, attempts: bool = False):
        self.location, self.kind, self.attempts = Location.of(location, kind.what), kind, attempts

    def __repr__(self) -> str:
        return f"OutputFolder({self.location}, {type(self.kind).__name__})"

    @property
    def manifest(self) -> Location:
        return self.location.join(self.kind.marker)

    def check_apart(self, inputs: Iterable[tuple[storage.Where, str]]) -> None:
        """OverlapError when this folder equals, holds or lies inside one of `inputs` (`check_apart`)."""
        check_apart(self.location, self.kind.what, inputs)

    def check_replaceable(self) -> list[str]:
        """The folder's entries once each is the kind's own (`[]` when there is nothing); ForeignDataError naming
        the others, BoundaryError for a link. The folder's identity is taken now (`core.anchor.seen`): `held()`
        writes into this folder, not one put in its place since."""
        if self.location.local_path is not None:
            anchor.seen(self.location.local_path)
        return ownership.check_only_ours(self.location, self._ours(), what=self.kind.what, advice=self.kind.advice)

    def _ours(self) -> Callable[[str], bool]:
        """The kind's own entries, and what an unfinished in-place write recorded (`writing`) with its journal."""
        ours = self.kind.ours(self.location)
        recorded = ownership.with_parents(ownership.recorded_writes(self.location) | {ownership.JOURNAL})
        return lambda entry: ours(entry) or entry in recorded

    def settle(self) -> None:
        """Finish what a killed commit left of this local folder (`stage.run` calls it first): the staging
        marker a swap had not yet removed from a committed output, and the previous outputs it set aside
        (`ownership.set_aside`), removed where their kind vouches for every entry (one that holds anything
        else is left as it is)."""
        local = self.location.local_path
        if local is None or local.is_symlink():  # a link is refused by the ownership check, never followed here
            return
        if (local / self.kind.marker).is_file() and (local / ownership.STAGING_MARKER).is_file():
            (local / ownership.STAGING_MARKER).unlink()
        for old in ownership.set_aside(local):
            where = Location.of(old)
            try:
                entries = ownership.check_only_ours(where, self.kind.ours(where), what=self.kind.what, advice="")
            except ownership.ForeignDataError:
                continue
            ownership.remove_ours(where, entries, last=self.kind.marker)

    # --- a whole output, staged then committed -----------------------------------------------------------
    def stage(self, fingerprint: str = "") -> Staging:
        """An empty staging area for a new output (one left by a crashed run of the same folder is replaced;
        one holding anything else is refused)."""
        local = self.location.local_path
        if local is not None:
            folder = local.with_name(f".{local.name}.partial" + (f"-{fingerprint[:16]}" if fingerprint else ""))
            ownership.make_staging(folder)
            return Staging(Location.of(folder))
        if self.attempts:
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            name = f"{ATTEMPT}{fingerprint[:12]}-{stamp}-{uuid.uuid4().hex[:8]}"
            ownership.make_staging(self.location.join(name))
            return Staging(self.location.join(name), name + "/")
        return Staging(Location.of(tempfile.mkdtemp(prefix="interlingua-output-")), scratch=True)

    def stage_in_place(self) -> Staging:
        """The folder itself as its staging area, marked as the product's until its manifest: for an output no
        reader opens before its manifest is there and that is never replaced, only made anew elsewhere (a
        content-addressed folder, whose files workers on any node write where they stay)."""
        ownership.make_staging(self.location)
        return Staging(self.location)

    def commit(self, staging: Staging, manifest: bytes | None) -> None:
        """Make the staged output this folder's, `manifest` (the kind's marker file; None: the staging area
        already holds it) written last; then remove the previous output's own entries. ForeignDataError, before
        anything moves, when the folder holds what the product did not write."""
        fencing.check()
        if staging.root == self.location:  # `stage_in_place`: the manifest makes it whole
            assert manifest is not None, "an output staged in place is committed by its manifest"
            self.manifest.replace_bytes(manifest)
            return
        local = self.location.local_path
        if local is not None:
            if manifest is not None:
                staging.join(self.kind.marker).replace_bytes(manifest)
            previous = self.check_replaceable() if local.exists() else None
            ownership.swap_in(staging.local, local, previous, last=self.kind.marker)
            return
        if staging.prefix:  # the attempt prefix's files are in place: the manifest at the root names them
            assert manifest is not None, "an attempt's manifest is written by the commit"
            self.manifest.replace_bytes(manifest)
            for name in self.location.subdirectories():
                if name.startswith(ATTEMPT) and name + "/" != staging.prefix:
                    ownership.remove_staging(self.location.join(name))  # only prefixes marked as the product's
            return
        previous = self.check_replaceable()
        if self.kind.marker in previous:  # no reader finds the old manifest beside the new files
            self.manifest.delete()
        if manifest is not None:
            staging.join(self.kind.marker).write_bytes(manifest)
        names = [n for n in transfer.upload_dir(staging.local, str(self.location), last=(self.kind.marker,))]
        stale = [n for n in previous if n not in ownership.with_parents(names)]
        if stale:
            ownership.remove_ours(self.location, stale, keep_root=True)
        shutil.rmtree(staging.local, ignore_errors=True)

    def discard(self, staging: Staging) -> None:
        """Remove a staging area whose output will not be committed (an error, an interrupt); the previous
        output is untouched."""
        if staging.scratch:
            shutil.rmtree(staging.local, ignore_errors=True)
        elif not staging.prefix:  # a store's attempt prefix is removed by the next commit
            ownership.remove_staging(staging.root)

    @contextlib.contextmanager
    def held(self, staging: Staging | None = None) -> Iterator[None]:
        """While the block runs, every local write under this folder (or under `staging`, a local staging
        folder) goes through it as it was when checked (`core.anchor.held`); nothing for a store."""
        root = staging.root.local_path if staging is not None else self.location.local_path
        if root is None:
            yield
            return
        with anchor.held(root):
            yield

    # --- an output written in place ------------------------------------------------------------------------
    def write_record(self, name: str, data: bytes) -> None:
        """Replace the record `name` of an output kept in place (a training run's `run.json`, its config) whole:
        the fence first (a run whose lease was taken over writes nothing), then a new file renamed over the old
        one (a reader sees one or the other; a user's hard link to the old one keeps its bytes), through the
        folder as `check_replaceable` saw it while `held()`. The kind vouches for the name (AssertionError
        otherwise): a record is never written where a user's file could be."""
        assert self.kind.ours(self.location)(name) or name == self.kind.marker, f"{name}: not a {self.kind.what} record"
        fencing.check()
        with self.held():
            self.location.join(name).replace_bytes(data)

    @contextlib.contextmanager
    def writing(self, names: list[str]) -> Iterator[None]:
        """Record `names` (relative to the folder) as the product's before they are written in place, with the
        previous output's own files, and remove the previous manifest (an unfinished output is never taken for a
        finished one); when the block ends without an error (`commit_in_place`, called in it, wrote the manifest
        naming them), remove the recorded files the new manifest does not name (the previous output's stale
        ones), then forget the record. A run killed at any point leaves every file it or the previous output
        wrote recorded as the product's."""
        ours = self.kind.ours(self.location)
        previous = [name for name in self.location.files() if ours(name)] if self.manifest.exists() else []
        ownership.begin_writes(self.location, [self.kind.marker, *names, *previous])  # all of it stays known
        ownership.remove_temporaries(self.location, self._ours())  # a killed run's
        if self.manifest.exists():
            self.manifest.delete()
        yield
        ours = self.kind.ours(self.location)  # the new manifest's
        stale = [name for name in sorted(ownership.recorded_writes(self.location)) if not ours(name)]
        ownership.remove_ours(self.location, [n for n in stale if n != ownership.JOURNAL], keep_root=True)
        ownership.end_writes(self.location)

    def commit_in_place(self, manifest: bytes, *, files_from: Path | None = None) -> None:
        """Commit an output written in place (inside `writing`): the fence first, then the files of
        `files_from` (a local scratch folder where a store's output was made) copied up, the manifest last."""
        fencing.check()
        if files_from is not None:
            transfer.upload_dir(files_from, str(self.location))
        self.manifest.replace_bytes(manifest)
