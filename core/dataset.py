"""The prepared dataset on disk: Parquet schema, manifest, atomic publication, reading.

Layout of a dataset directory (`<run_dir>/data`):

    manifest.json         written last: a directory without it is not a dataset
    config.yaml           the resolved run config
    spm.model, spm.vocab  the joint BPE model
    train/part-00000-of-00004.parquet ...   dev/...   test/...
    teacher/<fingerprint>/...   a teacher's embeddings of the training split, when one was used (`core.teacher`)

A run builds everything in a sibling staging directory and renames it into
place only when complete, so a crash never leaves a dataset that looks done.
A dataset at a URI (s3://, gs://, hdfs://, file://) is committed by its
manifest instead (`pipelines.staging`): its files sit under a per-run prefix
that the manifest names. Readers here take either kind of location and read
only the files that the manifest names, by their paths relative to the dataset.
"""
from __future__ import annotations

import hashlib
import json
import posixpath
import re
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import UserError
from core import ownership, storage, teacher
from core.schema import wrong_fields

FORMAT = "interlingua-dataset/1"
SPLITS = ("train", "dev", "test")
MANIFEST = "manifest.json"
SPM_MODEL = "spm.model"
CONFIG_FILE = "config.yaml"  # the resolved run config, beside every output
SPM_VOCAB = "spm.vocab"
ATTEMPT = "attempt-"  # a run's prefix under a URI dataset (`pipelines.staging`)
# What a run writes under its attempt prefix, and nothing else: a user's file there is never taken for the
# product's (nor deleted with the prefix)
_ATTEMPT_FILES = re.compile(
    rf"{ATTEMPT}[^/]+(/({re.escape(ownership.STAGING_MARKER)}|{re.escape(SPM_MODEL)}|{re.escape(SPM_VOCAB)}|"
    rf"{re.escape(CONFIG_FILE)}|({'|'.join(SPLITS)})(/part-\d{{5}}-of-\d{{5}}\.parquet)?))?")
# Token ids: sentencepiece reserves these; the stored ids never contain bos/eos.
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


class DatasetError(UserError, RuntimeError):
    """A dataset directory that is missing, incomplete or of another format."""


class _Part(BaseModel):
    # extra keys ignored: a dataset an earlier version wrote, with a field since dropped, still reads
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True, protected_namespaces=())


class ShardFile(_Part):
    path: str  # relative to the dataset (under its attempt prefix at a URI)
    rows: int
    bytes: int
    sha256: str | None = None  # None only in a dataset of an early version: `verify` refuses it


class SplitFiles(_Part):
    tuples: int
    files: list[ShardFile]


class SpmFiles(_Part):
    """The joint BPE model and the ids it reserves."""

    model: str = SPM_MODEL
    vocab: str | None = None
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


def schema(languages: list[str]) -> pa.Schema:
    """One row per tuple; per language its text, token ids and token count (null if absent)."""
    fields = [pa.field("key", pa.string(), nullable=False)]
    for lang in languages:
        fields += [
            pa.field(f"{lang}_text", pa.string()),
            pa.field(f"{lang}_ids", pa.list_(pa.int32())),
            pa.field(f"{lang}_len", pa.int32()),
        ]
    return pa.schema(fields)


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}/part-{index:05d}-of-{count:05d}.parquet"


def source_of(key: str) -> str:
    """The source a tuple came from: its key's first part (`source:...`, as prepare names every tuple)."""
    return key.split(":", 1)[0]


def write_shard(path: str, rows: list[dict[str, Any]], languages: list[str]) -> None:
    """Write rows (sorted by key for identical reruns) to one Parquet file (a local path or a URI).

    Its size and checksum are taken once, for the manifest, when the dataset is complete.
    """
    rows = sorted(rows, key=lambda r: r["key"])
    fields = schema(languages)
    # column by column: half the time of Table.from_pylist over row dicts
    table = pa.table({f.name: pa.array([r.get(f.name) for r in rows], type=f.type) for f in fields},
                     schema=fields)
    fs, where = storage.resolve(path)  # a local path or a URI: the same writer, the same bytes
    fs.create_dir(posixpath.dirname(where), recursive=True)
    pq.write_table(table, where, filesystem=fs, compression="zstd")


def shard_rows(path: str | Path) -> int:
    """The number of rows in one Parquet shard (a local path or a URI), from its footer."""
    fs, where = storage.resolve(path)
    with fs.open_input_file(where) as handle:
        return pq.ParquetFile(handle).metadata.num_rows


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file (a local path or a URI), hex."""
    return storage.sha256(path)


def fingerprint(payload: Any) -> str:
    """The content fingerprint of what a stage's output is made from (JSON-able values, key order
    ignored): the one helper behind the dataset, checkpoint and evaluation caches."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def staging_dir(data_dir: Path, fingerprint: str) -> Path:
    """Where a run builds its dataset before publishing it (one per config and input)."""
    return data_dir.with_name(f".{data_dir.name}.partial-{fingerprint[:16]}")


def write_manifest(data_dir: str | Path, manifest: DatasetManifest) -> None:
    """The manifest, replaced whole: from then on `data_dir` (local or a URI) is the dataset it names."""
    storage.write_json(storage.join(data_dir, MANIFEST), manifest.dump())


def publish(staging: Path, data_dir: Path, manifest: DatasetManifest) -> None:
    """Write the manifest into `staging`, then swap it into `data_dir` atomically. The previous dataset stays
    whole until the new one is in; then only its own files are removed. ForeignDataError, before anything
    moves, if `data_dir` holds anything but a dataset's files (`check_replaceable`)."""
    write_manifest(staging, manifest)
    ownership.swap_in(staging, data_dir, check_replaceable(data_dir) if data_dir.exists() else None)


def own_entries(manifest: DatasetManifest | None) -> set[str]:
    """What a dataset consists of, as paths relative to its directory: the files its manifest names, the
    manifest, config.yaml and spm.vocab beside them, and their directories."""
    if manifest is None:
        return set()
    names = [f.path for split in manifest.splits.values() for f in split.files]
    spm = manifest.spm
    prefix = posixpath.dirname(spm.model)  # "" for a local dataset, `attempt-.../` under a URI
    names += [spm.model, spm.vocab or posixpath.join(prefix, SPM_VOCAB),
              posixpath.join(prefix, CONFIG_FILE), MANIFEST, ownership.STAGING_MARKER]
    return ownership.with_parents(names)


def check_replaceable(data_dir: str | Path, *, what: str = "dataset_dir") -> list[str]:
    """The entries of `data_dir` once it is known to hold nothing but a dataset (or nothing at all): what may
    be removed when a new dataset replaces it. ForeignDataError naming the path and the other files."""
    manifest = None
    if storage.exists(storage.join(data_dir, MANIFEST)):
        try:
            manifest = load_manifest(data_dir)
        except DatasetError as exc:
            raise ownership.ForeignDataError(
                f"{what}: {data_dir} holds a manifest.json that is not an interlingua dataset's ({exc}); it is "
                "never replaced: choose another directory") from None
    ours = own_entries(manifest)
    # a URI's attempt prefixes: the current dataset's files and those of crashed runs, each marked as staging
    # and holding only what a run writes there
    staged = {name for name in storage.subdirectories(data_dir) if ownership.is_staging(storage.join(data_dir, name))}
    # and the teacher embeddings computed from it (`core.teacher`), which go with it
    return ownership.check_only_ours(
        data_dir, lambda e: e in ours or (e.split("/")[0] in staged and _ATTEMPT_FILES.fullmatch(e) is not None)
        or teacher.ours(data_dir, e),
        what=what, advice="choose a new or empty directory for the dataset, or move those files away")


def load_manifest(data_dir: str | Path) -> DatasetManifest:
    """The manifest of a complete dataset (a local directory or a URI). Raises DatasetError otherwise, naming
    the file and, for a manifest of this format that does not hold one, its first wrong field."""
    path = storage.join(data_dir, MANIFEST)
    try:
        manifest = json.loads(storage.read_bytes(path))
    except FileNotFoundError:
        raise DatasetError(
            f"{data_dir}: no {MANIFEST}: not a finished dataset; run `interlingua prepare` first"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: not a readable manifest ({exc}); run `interlingua prepare --force`") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise DatasetError(f"{path}: format {found!r}, expected {FORMAT!r}")
    try:
        return DatasetManifest.model_validate(manifest)
    except ValidationError as exc:
        raise DatasetError(f"{path}: not a dataset manifest ({wrong_fields(exc)}); run "
                           "`interlingua prepare --force`") from None


def split_files(data_dir: str | Path, split: str) -> list[Path] | list[str]:
    """The Parquet shards of one split of a complete dataset: Paths under a local directory, URIs under a URI."""
    manifest = load_manifest(data_dir)
    if split not in manifest.splits:
        raise DatasetError(f"{data_dir}: no split {split!r}; it has {list(manifest.splits)}")
    paths = [f.path for f in manifest.splits[split].files]
    if storage.is_uri(data_dir):
        return [storage.join(data_dir, p) for p in paths]
    return [Path(data_dir) / p for p in paths]


def verify(data_dir: str | Path, splits: list[str] | tuple[str, ...], *, spm: bool = True) -> DatasetManifest:
    """Check the shards of `splits` (and spm.model) against the size and sha256 the manifest recorded, before
    a stage reads them; the manifest. DatasetError naming the first file that is missing or differs."""
    manifest = load_manifest(data_dir)
    files = []
    for split in splits:
        if split not in manifest.splits:
            raise DatasetError(f"{data_dir}: no split {split!r}; it has {list(manifest.splits)}")
        files += [(f.path, f.sha256) for f in manifest.splits[split].files]
    if spm:
        files.append((manifest.spm.model, manifest.spm.sha256))
    for relative, recorded in files:
        _verify_file(data_dir, relative, recorded)
    return manifest


def _verify_file(data_dir: str | Path, relative: str, recorded: str | None) -> None:
    location = storage.join(data_dir, relative)
    advice = "; run `interlingua prepare --force`"
    if not recorded:
        raise DatasetError(f"{location}: no sha256 in {MANIFEST}{advice}")
    storage.verify_sha256(location, recorded, named_in=MANIFEST, error=DatasetError, advice=advice)


def recorded_sha256(manifest: DatasetManifest, splits: list[str] | tuple[str, ...], *,
                    spm: bool = True) -> dict[str, str | None]:
    """{relative path: sha256} of the shards of `splits` (and spm.model) as `manifest` records them: what
    `verify` checked, for a cache key that changes with the data read."""
    files = {f.path: f.sha256 for split in splits for f in manifest.splits[split].files}
    if spm:
        files[manifest.spm.model] = manifest.spm.sha256
    return files


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
    def open(cls, location: str | Path) -> Dataset:
        """DatasetError when `location` holds no finished dataset of this format."""
        return cls(location, load_manifest(location))

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

    def verify(self, splits: list[str] | tuple[str, ...], *, spm: bool = True) -> Dataset:
        """This dataset, once the shards of `splits` (and spm.model) match the manifest (`verify`)."""
        verify(self.location, splits, spm=spm)
        return self

    def sha256(self, splits: list[str] | tuple[str, ...], *, spm: bool = True) -> dict[str, str]:
        """{relative path: sha256} of what `verify` checks (`recorded_sha256`): a cache key of the data read."""
        return recorded_sha256(self.manifest, splits, spm=spm)

    def read(self, split: str, columns: list[str] | None = None) -> pa.Table:
        """One split as a pyarrow Table (`read_split`)."""
        return read_split(self.location, split, columns)
