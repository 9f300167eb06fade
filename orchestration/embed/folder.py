"""`interlingua embed`'s output folder: the section of its manifest embed writes (`EmbedMeta`), and which of a
folder's files are embed's own (its manifest, blocks and records, of this layout or the earlier one, and a
killed run's temporary files), so that a user's file there is never replaced.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationError

from core import ownership, storage
from evaluation import store
from orchestration.embed.inputs import CorpusError, InputFile

Location = str | Path

MANIFEST = store.MANIFEST
LEGACY_FORMAT = "interlingua-embeddings/1"  # blocks at the top (part-N.npy): recognised as ours, never resumed


class BlockSource(BaseModel):
    """Where one block's sentences came from."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    source: str | None = None
    first_line: int | None = None
    rows: int
    empty: int | None = None


class EmbedJob(BaseModel):
    """The options the blocks were embedded with."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    column: str
    block_rows: int
    actors: int
    cpus_per_actor: int
    use_gpu: bool
    max_tokens: int
    backend: str = "torch"


class EmbedModel(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    dir: str  # the model directory, absolute (local or a URI)
    model_sha256: str  # of its model.safetensors


class EmbedMeta(BaseModel):
    """embed's section (`meta`) of its store manifest (`evaluation.store.StoreManifest`)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    fingerprint: str  # of the inputs, the model and the options: a rerun with another one is refused
    lang: str
    empty: int  # empty lines among the rows (embedded, so that row i is line i)
    inputs: list[InputFile]
    model: EmbedModel
    sources: list[BlockSource]
    job: EmbedJob
    config: dict[str, Any] = {}  # the resolved run config


_RECORD = re.compile(r"part-\d{5}\.json")
# a block being written: `storage.replace_bytes`'s temporary name, unique to one write (created with O_EXCL), so
# never a name a user's file holds by chance (a record's: storage.write_json's, the same form)
TMP_BLOCK = re.compile(r"([^/]+/)?part-\d{5}\.npy\.tmp-[0-9a-f]{8}")


def check_output(out_dir: Location, *, what: str = "-o", ours: Callable[[str], bool] | None = None) -> list[str]:
    """The entries of an embeddings folder once each is this product's (`own_entries`, or `ours` when the
    caller has read the folder's records already); ForeignDataError naming the others (a user's files, or
    the inputs themselves when the output is their folder)."""
    return ownership.check_only_ours(
        out_dir,
        ours or own_entries(out_dir),
        what=what,
        advice="give a new or empty output directory (--force replaces only interlingua's own embeddings)",
    )


def own_entries(out_dir: Location) -> Callable[[str], bool]:
    """Whether a path relative to `out_dir` is this product's embeddings output: the manifest it wrote, its
    blocks and their records (this layout or the earlier one), a killed run's temporary files."""
    return owned(scan_records(out_dir), read_own_manifest(out_dir))


class Scan(NamedTuple):
    files: list[str]
    records: dict[str, store.BlockRecord]  # part-NNNNN.json -> embed's record of that block
    legacy: dict[str, set[str]]  # an earlier layout's record -> what it and its block consist of


class Manifest(NamedTuple):
    current: store.StoreManifest | None  # the manifest embed writes, with its fingerprint under meta
    legacy: set[str]  # what an earlier layout's manifest names (with it); empty otherwise


def owned(scan: Scan, manifest: Manifest) -> Callable[[str], bool]:
    ours = ownership.with_parents(f for f in scan.files if TMP_BLOCK.fullmatch(f))
    for name, record in scan.records.items():
        ours |= {name} | store.block_files([record.name], record.sha256)
    for entries in scan.legacy.values():
        ours |= entries
    if manifest.current is not None:
        ours |= {MANIFEST, *store.block_files([b.name for b in manifest.current.blocks], manifest.current.languages)}
    return (ours | manifest.legacy).__contains__


def scan_records(out_dir: Location) -> Scan:
    """The folder's files, and every block record embed wrote: part-NNNNN.json with its name, fingerprint, index
    and {lang: sha256}; or, in the earlier layout, a record of `part-N.npy` beside it. Other such files are not
    records."""
    files, records, legacy = storage.files(out_dir), {}, {}
    for name in files:
        if not _RECORD.fullmatch(name):
            continue
        try:
            raw = storage.read_json(storage.join(out_dir, name))
        except (OSError, ValueError):
            continue
        if not isinstance(raw, dict) or not {"name", "fingerprint", "index"} <= raw.keys():
            continue
        if str(raw["name"]).endswith(".npy"):  # the earlier layout: the block beside its record
            legacy[name] = {name, str(raw["name"])}
        else:
            try:
                records[name] = store.BlockRecord.model_validate(raw)  # read once: a GET each at a URI
            except ValidationError:
                continue  # not a block record of this layout: not ours by it
    return Scan(files, records, legacy)


def read_own_manifest(out_dir: Location) -> Manifest:
    """The folder's manifest if this product's embed wrote it (the stored-embeddings format with a
    fingerprint, or the earlier layout's: its format marker or, before the marker existed, its fields)."""
    try:
        raw = storage.read_json(storage.join(out_dir, MANIFEST))  # read once: a GET at a URI
    except (OSError, ValueError):
        return Manifest(None, set())
    if not isinstance(raw, dict) or not isinstance(raw.get("blocks"), list):
        return Manifest(None, set())
    try:
        current = store.StoreManifest.model_validate(raw)
    except ValidationError:
        current = None
    if current is not None:
        return Manifest(current if current.format == store.FORMAT and "fingerprint" in current.meta else None, set())
    form = raw.get("format")
    if form == LEGACY_FORMAT or (not form and {"fingerprint", "lang", "model"} <= raw.keys()):
        names = [str(b["name"]) for b in raw["blocks"] if isinstance(b, dict) and "name" in b]
        return Manifest(None, {MANIFEST, *names, *(n.removesuffix(".npy") + ".json" for n in names)})
    return Manifest(None, set())


def check_not_inside(out_dir: Location, files: list[InputFile]) -> None:
    """CorpusError when an input lies inside the output folder: its blocks would be read as input next time."""
    if storage.is_uri(out_dir):
        root = str(out_dir).rstrip("/") + "/"
        inside = [f.path for f in files if f.path.startswith(root)]
    else:
        inside = [
            f.path
            for f in files
            if not storage.is_uri(f.path) and Path(out_dir).resolve() in Path(f.path).resolve().parents
        ]
    if inside:
        raise CorpusError(
            f"-o {out_dir}: the input {inside[0]} is inside the output directory; "
            "write the embeddings to a directory of their own"
        )
