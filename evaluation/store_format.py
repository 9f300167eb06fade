"""The format of embeddings on disk in blocks, each with its completion record: the one format that `evaluate`
(`write_block` + `finish`), `embed` and `mine` (`save_block`, in `embed.corpus`) write
(`evaluation.store_writer`) and `evaluation.store.StoredEmbeddings` reads, from a local folder or a URI; its
files' models, names and the sha256 each manifest records (`named_files`). Its users import them from
`evaluation.store`.

    <folder>/<lang>/part-NNNNN.npy       (n, D) the rows [start, start + n) of each language
    <folder>/part-NNNNN.json             the block's record, written after its arrays: name, rows, the sha256
                                         of each array and of its rows file, and the writer's own fields
                                         (evaluate: start, first and last key; embed: index, source,
                                         first_line, empty, fingerprint, job_fingerprint, input_sha256)
    <folder>/rows/part-NNNNN.parquet     optional (evaluate): key, <lang>_text, <lang>_hash of those rows
    <folder>/keys.json                   optional (evaluate): every key, in row order, for tools
    <folder>/manifest.json               written last: format, languages, dim, dtype, rows, columns (of the
                                         rows files; [] without), blocks (name, start, rows, sha256,
                                         rows_sha256), meta (the writer's own: evaluate's model; embed's
                                         fingerprint, lang, empty, inputs, model, the blocks' sources, job, config)

Rows are aligned across languages (row i of every language is one tuple). Evaluate's rows are in key order:
its driver writes each batch of tuples, in any order, as a block of a staging folder (`write_block`); `finish`
orders the blocks by key, checks that they neither overlap nor repeat, names them `part-NNNNN` and writes their
records; the commit writes the manifest and renames the folder into place (`store_writer.output`). Embed's rows
are in input order, a block per planned range of an input file, written in place by `save_block`, locally or
at a URI (a rerun skips a block whose record is there). Readers (`StoredEmbeddings.rows`, one search task
each) read only the blocks they need.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from core.boundary import Segment
from core.errors import UserError
from core.location import Location, Where

FORMAT: Final = "interlingua-stored-embeddings/3"
# /1: evaluate's, before block records (no checksums); /2: no sha256 of the rows files
FORMATS: Final = ("interlingua-stored-embeddings/1", "interlingua-stored-embeddings/2", FORMAT)
BLOCK_FORMATS: Final = FORMATS[1:]  # with block records (embed's outputs of either are its own)
MANIFEST = "manifest.json"
ROWS = "rows"
KEYS = "keys.json"


class BlockRecord(BaseModel):
    """`<folder>/<name>.json`: one block's completion record, written after its arrays. Beside what every block
    has, the writer's own fields (evaluate's `start`, `first_key`, `last_key`; embed's `index`, `source`, `kind`,
    `first_line`, `empty`, `fingerprint`, `job_fingerprint`, `input_sha256`), left out of the file when unset."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: Segment
    rows: int
    sha256: dict[str, str]  # lang -> the sha256 of <lang>/<name>.npy
    rows_sha256: str | None = None  # of rows/<name>.parquet (evaluate's blocks)
    start: int | None = None
    first_key: str | None = None
    last_key: str | None = None
    index: int | None = None
    source: str | None = None
    kind: str | None = None
    first_line: int | None = None
    empty: int | None = None
    fingerprint: str | None = None  # embed: of the run that embedded the block (its inputs, model, options)
    job_fingerprint: str | None = None  # embed: of that run less the inputs' bytes (`embed.folder.fingerprints`)
    input_sha256: str | None = None  # embed: of the input the block was embedded from, as the actor read it


class BlockEntry(BaseModel):
    """A block as the manifest lists it (format /1's had no checksums, /2's none of the rows files)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Segment
    start: int
    rows: int
    sha256: dict[str, str] | None = None  # lang -> the sha256 of <lang>/<name>.npy
    rows_sha256: str | None = None  # of rows/<name>.parquet, where the store has rows files


class StoreManifest(BaseModel):
    """`<folder>/manifest.json`, written last. `meta` is the writer's own section, typed by the writer:
    evaluate's `EmbeddingsMeta`, embed's `orchestration.embed.folder.EmbedMeta`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal[
        "interlingua-stored-embeddings/1", "interlingua-stored-embeddings/2", "interlingua-stored-embeddings/3"
    ] = FORMATS[0]
    languages: list[Segment]
    dim: int
    dtype: str
    rows: int
    columns: list[str] | None = None  # of the rows files ([]: none); absent in format /1, which always had them
    blocks: list[BlockEntry]
    meta: dict[str, JsonValue] = {}

    def rows_columns(self) -> list[str]:
        """The columns of the rows files ([] for a store of vectors only)."""
        if self.columns is not None:
            return list(self.columns)
        return ["key", *(f"{lang}_{c}" for lang in self.languages for c in ("text", "hash"))]


class EmbeddingsMeta(BaseModel):
    """evaluate's section (`meta`) of the manifest of the embeddings it stores: which model embedded which data,
    so that `embed.search` knows them for its model's or another's."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    model: str  # the model file's sha256, or the baseline's name (`job.model_identity`)
    split: str  # the split or test set embedded
    data: str  # what was embedded: the dataset's fingerprint, or the test set's
    backend: str = "torch"  # the engine that ran the model (absent before engines were chosen: torch)


def block_name(index: int) -> str:
    """The name of the block `index` (0-based, in row order): its files are `<lang>/<name>.npy`, `<name>.json`."""
    return f"part-{index:05d}"


def read_record(path: Where) -> BlockRecord | None:
    """The block record at `path`; None when it is missing or not one (a block without its record is not done)."""
    try:
        return BlockRecord.model_validate_json(Location.of(path).read_bytes())
    except (OSError, ValidationError):
        return None


def read_manifest(folder: Where) -> StoreManifest | None:
    """The folder's manifest when it is a stored-embeddings manifest (of any of its formats), else None."""
    try:
        return StoreManifest.model_validate_json(Location.of(folder).join(MANIFEST).read_bytes())
    except (OSError, ValidationError):
        return None


class StoreError(UserError, ValueError):
    """A file of stored embeddings that is missing or differs from the sha256 its manifest records, or a
    manifest that does not record one its format has (exit 2, naming the file and the manifest)."""


ADVICE = "; write the embeddings again (`interlingua evaluate --force`, or `embed` into a new folder)"


def named_files(manifest: StoreManifest, named_in: str) -> dict[str, str | None]:
    """{relative path: sha256} of every file the manifest names, that a result is read from: each block's array
    per language and, where the store has them, its rows file, with the sha256 it records (None where its
    format records none: /1 nothing, /2 no rows file's). StoreError when a block lacks one its format has."""
    with_rows = bool(manifest.rows_columns())
    files: dict[str, str | None] = {}
    for block in manifest.blocks:
        files |= {f"{lang}/{block.name}.npy": (block.sha256 or {}).get(lang) for lang in manifest.languages}
        if with_rows:
            files[f"{ROWS}/{block.name}.parquet"] = block.rows_sha256
    for name, sha256 in files.items():
        legacy = manifest.format == FORMATS[0] or (manifest.format == FORMATS[1] and name.startswith(f"{ROWS}/"))
        if sha256 is None and not legacy:
            raise StoreError(f"{named_in}: records no sha256 of {name} ({manifest.format}){ADVICE}")
    return files
