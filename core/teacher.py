"""A teacher's embeddings of a prepared dataset's training split, stored beside its shards.

    <dataset>/teacher/<fingerprint>/
        .interlingua-staging                    written first: the folder is the product's
        train/part-00000-of-00004.parquet ...   one per training shard, the same rows in the same row groups
        manifest.json                           written last: a folder without it is not complete

The folder is an output of the `TeacherKind` (`core.output`), built in place (`OutputFolder.stage_in_place`)
and committed by its manifest (`OutputFolder.commit`): it is never replaced, only made anew under another
fingerprint.

The fingerprint is of the teacher (its kind and the identity of its weights) and of the training shards
(their sha256 in the dataset's manifest): another teacher or other data is another folder, and a rerun with the
same ones reuses it. Each file holds the shard's `key` column and, per language the teacher embeds,
`{lang}` (fixed-size lists of float16, zeros where the tuple lacks the language) and `{lang}_has` (bool).
The training stream reads a row group of it with the same row group of its shard (`model.batching`) and
checks that their keys agree.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, ValidationError

from core import ownership, storage
from core.boundary import Name, Segment, check_no_links
from core.errors import UserError
from core.location import Location
from core.output import OutputFolder
from core.schema import wrong_fields

FORMAT: Final = "interlingua-teacher/1"
FOLDER = "teacher"
MANIFEST = "manifest.json"
# What the product writes in a teacher's folder, and under a dataset's teacher folder (with the folder's marker):
# every other entry is a user's
_OWN = re.compile(
    rf"{re.escape(ownership.STAGING_MARKER)}|{re.escape(MANIFEST)}|train(/part-\d{{5}}-of-\d{{5}}\.parquet)?"
)
ENTRIES = re.compile(rf"{FOLDER}(/[0-9a-f]{{16}}(/({_OWN.pattern}))?)?")


class TeacherStoreError(UserError, RuntimeError):
    """Teacher embeddings that are missing, incomplete, damaged or of another format."""


class TeacherFile(BaseModel):
    """One teacher file's record (`write_shard`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: int
    bytes: int
    sha256: str


class TeacherManifest(BaseModel):
    """`<folder>/manifest.json`, written last (the commit of `folder`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["interlingua-teacher/1"] = FORMAT
    teacher: dict[str, str]  # its identity: kind, and what tells its weights apart (`train.teacher.TeacherSpec`)
    languages: list[Segment]  # those it embeds, of the dataset's
    dim: int
    data: dict[str, str]  # the training shards' sha256 (relative path -> sha256), as the dataset records them
    files: dict[Name, TeacherFile]  # relative path -> its record
    rows: int  # tuples, all files

    @classmethod
    def of(
        cls,
        files: Mapping[str, TeacherFile],
        *,
        teacher: Mapping[str, str],
        languages: Sequence[str],
        dim: int,
        data: Mapping[str, str],
    ) -> TeacherManifest:
        """The manifest of a teacher's `files` (relative path -> record) of the training shards `data`."""
        return cls(
            teacher=dict(teacher),
            languages=list(languages),
            dim=dim,
            data=dict(data),
            files=dict(sorted(files.items())),
            rows=sum(r.rows for r in files.values()),
        )

    def file_bytes(self) -> bytes:
        """The manifest's file, as the commit writes it."""
        return storage.json_bytes(self.model_dump(mode="json"))


class TeacherKind:
    """A teacher's embeddings as an output kind (`core.output.Kind`): in a folder marked as the product's, its
    files under train/ and the manifest, written last; anything else is a user's."""

    what = "the teacher's embeddings"
    marker = MANIFEST
    advice = "move them away; interlingua writes a teacher's embeddings only into a folder of its own"

    def ours(self, folder: Location) -> Callable[[str], bool]:
        staged = ownership.is_staging(folder)
        return lambda entry: staged and _OWN.fullmatch(entry) is not None


def folder(where: storage.Where) -> OutputFolder:
    """The teacher's embeddings at `where` (`location`) as an output: built in place by workers on any node
    (`OutputFolder.stage_in_place`), complete once `OutputFolder.commit` writes its manifest."""
    return OutputFolder(where, TeacherKind())


def location(data_location: storage.Where, fingerprint: str) -> str:
    """The folder of the teacher embeddings with this fingerprint, under a dataset."""
    return storage.join(data_location, FOLDER, fingerprint[:16])


def ours(data_location: storage.Where, entry: str) -> bool:
    """Whether `entry` (relative to a dataset) is a teacher folder's file the product wrote: its name is one
    the product gives and its folder holds the product's marker."""
    if ENTRIES.fullmatch(entry) is None:
        return False
    parts = entry.split("/")
    return len(parts) < 2 or ownership.is_staging(storage.join(data_location, *parts[:2]))


def write_shard(
    where: storage.Where,
    keys: Sequence[str],
    vectors: Mapping[str, np.ndarray],
    present: Mapping[str, np.ndarray],
    row_groups: Sequence[int],
) -> TeacherFile:
    """One teacher file: the shard's keys, each language's vectors (n, D) and which rows have one, in row
    groups of the shard's sizes. Its record for the manifest (rows, bytes, sha256)."""
    dim = next(iter(vectors.values())).shape[1] if vectors else 0
    columns: dict[str, pa.Array] = {"key": pa.array(list(keys), pa.string())}
    for lang, array in vectors.items():
        flat = pa.array(np.ascontiguousarray(array, dtype=np.float16).reshape(-1), pa.float16())
        columns[lang] = pa.FixedSizeListArray.from_arrays(flat, dim)
        columns[f"{lang}_has"] = pa.array(np.asarray(present[lang], bool))
    table = pa.table(columns)
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, table.schema, compression="zstd") as writer:
        start = 0
        for size in row_groups:
            writer.write_table(table.slice(start, size), row_group_size=max(size, 1))
            start += size
    data = sink.getvalue().to_pybytes()
    storage.replace_bytes(where, data)
    return TeacherFile(rows=len(keys), bytes=len(data), sha256=hashlib.sha256(data).hexdigest())


def read_row_group(
    where: storage.Where, row_group: int, languages: Sequence[str]
) -> tuple[list[str], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(keys, {lang: vectors (n, D) float16}, {lang: which rows have one}) of one row group of a teacher file."""
    columns = ["key", *[c for lang in languages for c in (lang, f"{lang}_has")]]
    table = storage.open_parquet(where).read_row_group(row_group, columns=columns)
    vectors, present = {}, {}
    for lang in languages:
        column = table.column(lang).combine_chunks()
        # flatten(): the values of these rows (`.values` would ignore a slice's offset)
        vectors[lang] = column.flatten().to_numpy(zero_copy_only=False).reshape(len(table), column.type.list_size)
        present[lang] = table.column(f"{lang}_has").to_numpy(zero_copy_only=False).astype(bool)
    return table.column("key").to_pylist(), vectors, present


@dataclass(frozen=True)
class TeacherStore:
    """Complete teacher embeddings (their manifest read): small and picklable, for the training workers."""

    location: str
    manifest: TeacherManifest

    @classmethod
    def open(cls, where: storage.Where) -> TeacherStore:
        """TeacherStoreError when `where` holds no complete teacher embeddings of this format, naming the
        manifest's first wrong field."""
        path = storage.join(where, MANIFEST)
        check_no_links(where, "the teacher's embeddings")
        try:
            manifest = storage.read_json(path)
        except FileNotFoundError:
            raise TeacherStoreError(f"{where}: no {MANIFEST}: the teacher embeddings are not complete") from None
        except ValueError as exc:
            raise TeacherStoreError(f"{path}: not a readable manifest ({exc})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise TeacherStoreError(f"{path}: not a manifest of {FORMAT}")
        try:
            return cls(str(where), TeacherManifest.model_validate(manifest))
        except ValidationError as exc:
            raise TeacherStoreError(f"{path}: not a teacher manifest ({wrong_fields(exc)})") from None

    @property
    def languages(self) -> list[str]:
        return list(self.manifest.languages)

    @property
    def dim(self) -> int:
        return self.manifest.dim

    def file_for(self, shard: str) -> str:
        """The teacher file of a training shard (a location `Dataset.files` gives)."""
        return storage.join(self.location, "train", posixpath.basename(str(shard)))

    def verify(self) -> TeacherStore:
        """This store, once every file matches the size and sha256 its manifest records; TeacherStoreError
        naming the first that does not."""
        for name, record in self.manifest.files.items():
            storage.verify_sha256(
                storage.join(self.location, name), record.sha256, named_in=MANIFEST, error=TeacherStoreError
            )
        return self


@dataclass(frozen=True)
class TeacherInput:
    """What a training stream reads of a teacher (`model.batching`): its store, the pivot language, whether
    a batch carries the teacher's vectors of every language it encodes (`model.distill_languages: all`) or of
    its sources only, and each source's weight of its tuples' distillation terms
    (`model.distill_source_weights`: 1 for a source not named)."""

    store: TeacherStore
    pivot: str
    every_language: bool = False
    source_weights: Mapping[str, float] = field(default_factory=dict)
