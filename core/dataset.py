"""The prepared dataset on disk: its manifest, and reading it (`Dataset`); `core.dataset_writer` writes one.

Layout of a dataset directory (`<run_dir>/data`):

    manifest.json         written last: a directory without it is not a dataset
    config.yaml           the resolved run config
    spm.model, spm.vocab  the joint BPE model
    train/part-00000-of-00004.parquet ...   dev/...   test/...
    teacher/<fingerprint>/...   a teacher's embeddings of the training split, when one was used (`core.teacher`)

A run builds it in a staging area and commits it whole, its manifest last (`core.output`): a sibling folder
renamed into place, or in a store (s3://, gs://, hdfs://, file://) a per-run prefix that the manifest names.
Readers here take either kind of location and read only the files that the manifest names, by their paths
relative to the dataset.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core import storage
from core.boundary import Name, check_no_links
from core.errors import UserError
from core.regular import check_regular_file
from core.schema import wrong_fields
from core.token_ids import check_token_ids

FORMAT: Final = "interlingua-dataset/1"
SPLITS = ("train", "dev", "test")
MANIFEST = "manifest.json"
SPM_MODEL = "spm.model"
CONFIG_FILE = "config.yaml"  # the resolved run config, beside every output
SPM_VOCAB = "spm.vocab"
ATTEMPT = "attempt-"  # a run's prefix under a URI dataset (`core.output.ATTEMPT`)
_REDO = "; run `interlingua prepare --force`"  # what a damaged dataset's message ends with
# Token ids: sentencepiece reserves these; the stored ids never contain bos/eos.
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


class DatasetError(UserError, RuntimeError):
    """A dataset directory that is missing, incomplete or of another format."""


class _Part(BaseModel):
    # extra keys ignored: a dataset an earlier version wrote, with a field since dropped, still reads
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True, protected_namespaces=())


class ShardFile(_Part):
    path: Name  # relative to the dataset (under its attempt prefix at a URI)
    rows: int
    bytes: int
    sha256: str | None = None  # None only in a dataset of an early version: `verify` refuses it


class SplitFiles(_Part):
    tuples: int
    files: list[ShardFile]


class SpmFiles(_Part):
    """The joint BPE model and the ids it reserves."""

    model: Name = SPM_MODEL
    vocab: Name | None = None
    model_type: str = "bpe"
    vocab_size: int
    pad_id: int = PAD_ID
    unk_id: int = UNK_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    sha256: str | None = None
    sample_sentences: int = 0  # the training sentences it was learned from


class Tally(_Part):
    """Tuples, or one language's sentences: read, written per split, dropped per reason."""

    read: int = Field(0, alias="in")
    out: dict[str, int] = {}
    dropped: dict[str, int] = {}


class SourceTally(_Part):
    read: int = Field(0, alias="in")
    out: dict[str, int] = {}


class Counts(_Part):
    """What `prepare` read, wrote and dropped (`pipelines.accounting.count_table`)."""

    tuples: Tally
    sentences: dict[str, Tally] = {}  # lang -> its sentences
    sources: dict[str, SourceTally] = {}  # source name -> its tuples
    normalized: dict[str, dict[str, int]] = {}  # lang -> pattern -> sentences changed by it


class InputRecord(_Part):
    """One input a source read, with its checksum (`pipelines.read_task.SourcePlan.fingerprints`)."""

    source: str | None = None
    path: str
    sha256: str
    bytes: int | None = None
    lines: int | None = None
    lang: str | None = None
    versions: dict[str, str] | None = None  # the Bible's: lang -> version
    books: list[int] | None = None


class DatasetManifest(_Part):
    """`manifest.json`, written last: a directory without it is not a dataset."""

    format: Literal["interlingua-dataset/1"] = FORMAT
    fingerprint: str  # of the config and inputs it was made from
    languages: list[str]
    splits: dict[str, SplitFiles]
    table_schema: list[str] = Field([], alias="schema")  # the Parquet schema, for people
    spm: SpmFiles
    counts: Counts
    inputs: list[InputRecord] = []
    config: dict[str, Any] = {}  # the resolved run config (older: {"prepare": ...})

    @property
    def config_name(self) -> str | None:
        """The `name` of the config that prepared it (None before the resolved config was recorded)."""
        return self.config.get("name")

    def dump(self) -> dict[str, Any]:
        """As the file holds it."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def source_of(key: str) -> str:
    """The source a tuple came from: its key's first part (`source:...`, as prepare names every tuple)."""
    return key.split(":", 1)[0]


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file (a local path or a URI), hex."""
    return storage.sha256(path)


def fingerprint(payload: Any) -> str:
    """The content fingerprint of what a stage's output is made from (JSON-able values, key order
    ignored): the one helper behind the dataset, checkpoint and evaluation caches."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def load_manifest(data_dir: storage.Where) -> DatasetManifest:
    """The manifest of a complete dataset (a local directory or a URI). Raises DatasetError otherwise, naming
    the file and, for a manifest of this format that does not hold one, its first wrong field."""
    path = storage.join(data_dir, MANIFEST)
    check_no_links(data_dir, "the dataset")
    if not storage.is_uri(data_dir):  # a store holds no pipe or device, and a look costs a round trip
        check_regular_file(path, f"the dataset {data_dir}", error=DatasetError)
    try:
        manifest = json.loads(storage.read_bytes(path))
    except FileNotFoundError:
        raise DatasetError(
            f"{data_dir}: no {MANIFEST}: not a finished dataset; run `interlingua prepare` first"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: not a readable manifest ({exc}){_REDO}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise DatasetError(f"{path}: format {found!r}, expected {FORMAT!r}")
    try:
        return DatasetManifest.model_validate(manifest)
    except ValidationError as exc:
        raise DatasetError(f"{path}: not a dataset manifest ({wrong_fields(exc)}){_REDO}") from None


def split_files(data_dir: str | Path, split: str) -> list[Path] | list[str]:
    """The Parquet shards of one split of a complete dataset: Paths under a local directory (each checked to be
    a regular file: DatasetError), URIs under a URI (`verify` looks there: a store holds no pipe or device)."""
    manifest = load_manifest(data_dir)
    if split not in manifest.splits:
        raise DatasetError(f"{data_dir}: no split {split!r}; it has {list(manifest.splits)}")
    paths = [f.path for f in manifest.splits[split].files]
    if storage.is_uri(data_dir):
        return [storage.join(data_dir, p) for p in paths]
    for p in paths:
        check_regular_file(storage.join(data_dir, p), MANIFEST, error=DatasetError)
    return [Path(data_dir) / p for p in paths]


def verify(
    data_dir: storage.Where, splits: list[str] | tuple[str, ...], *, spm: bool = True, ids: bool | None = None
) -> DatasetManifest:
    """The manifest, once the shards of `splits` (and spm.model) are regular files (all looked at before any is
    read) of the sha256 it records that, with `ids` (default: `spm`), hold token ids in the vocabulary
    (`token_ids`). DatasetError naming the first file that is not, is missing or differs."""
    manifest = load_manifest(data_dir)
    if missing := [split for split in splits if split not in manifest.splits]:
        raise DatasetError(f"{data_dir}: no split {missing[0]!r}; it has {list(manifest.splits)}")
    files = {storage.join(data_dir, name): sha for name, sha in recorded_sha256(manifest, splits, spm=spm).items()}
    for location in files:
        check_regular_file(location, MANIFEST, error=DatasetError)
    for location, recorded in files.items():
        storage.verify_sha256(location, recorded, named_in=MANIFEST, error=DatasetError, advice=_REDO)
    if spm if ids is None else ids:
        columns, size = [f"{lang}_ids" for lang in manifest.languages], manifest.spm.vocab_size
        for name in recorded_sha256(manifest, splits, spm=False):
            location = storage.join(data_dir, name)
            check_token_ids(location, columns, size, named_in=MANIFEST, error=DatasetError, advice=_REDO)
    return manifest


def recorded_sha256(
    manifest: DatasetManifest, splits: list[str] | tuple[str, ...], *, spm: bool = True
) -> dict[str, str]:
    """{relative path: sha256} of the shards of `splits` (and spm.model) as `manifest` records them: what
    `verify` checked, a cache key of the data read. DatasetError for a file without one (an early version's)."""
    named = [(f.path, f.sha256) for split in splits for f in manifest.splits[split].files]
    if spm:
        named.append((manifest.spm.model, manifest.spm.sha256))
    for relative, recorded in named:
        if not recorded:
            raise DatasetError(f"{relative}: no sha256 in {MANIFEST}{_REDO}")
    return {relative: str(recorded) for relative, recorded in named}


def read_split(data_dir: str | Path, split: str, columns: list[str] | None = None) -> pa.Table:
    """One split as a pyarrow Table (all shards, in shard order)."""
    tables = []
    for location in split_files(data_dir, split):
        fs, path = storage.resolve(location)
        tables.append(pq.read_table(path, columns=columns, filesystem=fs))
    return pa.concat_tables(tables)


@dataclass(frozen=True)
class Dataset:
    """A prepared dataset opened once from its manifest: small and picklable, so a Ray task gets the handle
    and reads its own shards (as `evaluation.store.StoredEmbeddings`). Nothing outside this module indexes
    the manifest.

        data = Dataset.open(config.data_dir).verify(["test"])   # DatasetError naming a changed shard
        data.fingerprint, data.languages, data.vocab_size, data.files("test"), data.read("test", ["key"])
    """

    location: str | Path  # a local directory or a URI
    manifest: DatasetManifest = field(repr=False)

    @classmethod
    def open(cls, location: storage.Where) -> Dataset:
        """DatasetError when `location` holds no finished dataset of this format."""
        return cls(location if isinstance(location, str | Path) else str(location), load_manifest(location))

    @property
    def fingerprint(self) -> str:
        return self.manifest.fingerprint

    @property
    def languages(self) -> list[str]:
        return list(self.manifest.languages)

    @property
    def vocab_size(self) -> int:
        return self.manifest.spm.vocab_size

    @property
    def spm_model(self) -> str:
        """The location of its sentencepiece model (inside its attempt's prefix at a URI)."""
        return storage.join(self.location, self.manifest.spm.model)

    @property
    def spm_sha256(self) -> str | None:
        return self.manifest.spm.sha256

    @property
    def config_name(self) -> str | None:
        """The `name` of the config that prepared it (None before the resolved config was recorded)."""
        return self.manifest.config_name

    def files(self, split: str) -> list[Path] | list[str]:
        """The split's Parquet shards (`split_files`)."""
        return split_files(self.location, split)

    def verify(self, splits: list[str] | tuple[str, ...], *, spm: bool = True, ids: bool | None = None) -> Dataset:
        """This dataset, once the shards of `splits` (and spm.model) match the manifest (`verify`)."""
        verify(self.location, splits, spm=spm, ids=ids)
        return self

    def sha256(self, splits: list[str] | tuple[str, ...], *, spm: bool = True) -> dict[str, str]:
        """{relative path: sha256} of what `verify` checks (`recorded_sha256`): a cache key of the data read."""
        return recorded_sha256(self.manifest, splits, spm=spm)

    def read(self, split: str, columns: list[str] | None = None) -> pa.Table:
        """One split as a pyarrow Table (`read_split`)."""
        return read_split(self.location, split, columns)
