"""`interlingua embed`'s output folder: the section of its manifest embed writes (`EmbedMeta`, `make_manifest`),
and embed's output as an output kind (`EmbedKind`, `core.output`): which of a folder's files are embed's own (its
manifest, blocks and records, of this layout or the earlier one, and a killed run's temporary files), so that a
user's file there is never replaced.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from core import ownership
from core.dataset import fingerprint
from core.location import Location, Where
from core.output import OutputFolder
from evaluation import store, store_writer
from orchestration.embedding.inputs import CorpusError, InputFile

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

    fingerprint: str  # of the inputs, the model and the options (`fingerprints`)
    job_fingerprint: str | None = None  # of them less the inputs' bytes: a rerun with another one is refused
    lang: str
    empty: int  # empty lines among the rows (embedded, so that row i is line i)
    inputs: list[InputFile]
    model: EmbedModel
    sources: list[BlockSource]
    job: EmbedJob
    config: dict[str, JsonValue] = {}  # the resolved run config


_RECORD = re.compile(r"part-\d{5}\.json")
# a block being written: `Location.replace_bytes`'s temporary name, unique to one write (created with O_EXCL), so
# never a name a user's file holds by chance (a record's: Location.write_json's, the same form)
TMP_BLOCK = re.compile(r"([^/]+/)?part-\d{5}\.npy\.tmp-[0-9a-f]{8}")


class EmbedKind:
    """embed's output as an output kind (`core.output.Kind`): the manifest it wrote, its blocks and their
    records (this layout or the earlier one), a killed run's temporary files. `read`: the folder's records and
    manifest when the caller has read them already (`scan_records`, `read_own_manifest`: a GET per record in a
    store); otherwise `ours` reads them."""

    what = "-o"
    marker = MANIFEST
    advice = "give a new or empty output directory (--force replaces only interlingua's own embeddings)"

    def __init__(self, read: tuple[Scan, Manifest] | None = None) -> None:
        self.read = read

    def ours(self, folder: Location) -> Callable[[str], bool]:
        return owned(*(self.read or (scan_records(folder), read_own_manifest(folder))))


def output_folder(out_dir: Where, read: tuple[Scan, Manifest] | None = None) -> OutputFolder:
    """embed's output at `out_dir` (local or a URI) as an `OutputFolder` (`EmbedKind`): `check_replaceable()`
    is its entries once each is embed's own, ForeignDataError naming the others (a user's files, or the inputs
    themselves when the output is their folder)."""
    return OutputFolder(out_dir, EmbedKind(read))


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
        ours |= {name} | store_writer.block_files([record.name], record.sha256)
    for entries in scan.legacy.values():
        ours |= entries
    if manifest.current is not None:
        ours |= {
            MANIFEST,
            *store_writer.block_files([b.name for b in manifest.current.blocks], manifest.current.languages),
        }
    return (ours | manifest.legacy).__contains__


def scan_records(out_dir: Where) -> Scan:
    """The folder's files, and every block record embed wrote: part-NNNNN.json with its name, fingerprint, index
    and {lang: sha256}; or, in the earlier layout, a record of `part-N.npy` beside it. Other such files are not
    records."""
    folder = Location.of(out_dir)
    files, records, legacy = folder.files(), {}, {}
    for name in files:
        if not _RECORD.fullmatch(name):
            continue
        try:
            raw = folder.join(name).read_json()
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


def read_own_manifest(out_dir: Where) -> Manifest:
    """The folder's manifest if this product's embed wrote it (the stored-embeddings format with a
    fingerprint, or the earlier layout's: its format marker or, before the marker existed, its fields)."""
    try:
        raw = (Location.of(out_dir) / MANIFEST).read_json()  # read once: a GET at a URI
    except (OSError, ValueError):
        return Manifest(None, set())
    if not isinstance(raw, dict) or not isinstance(raw.get("blocks"), list):
        return Manifest(None, set())
    try:
        current = store.StoreManifest.model_validate(raw)
    except ValidationError:
        current = None
    if current is not None:
        ours = current.format in store.BLOCK_FORMATS and "fingerprint" in current.meta
        return Manifest(current if ours else None, set())
    form = raw.get("format")
    if form == LEGACY_FORMAT or (not form and {"fingerprint", "lang", "model"} <= raw.keys()):
        names = [str(b["name"]) for b in raw["blocks"] if isinstance(b, dict) and "name" in b]
        return Manifest(None, {MANIFEST, *names, *(n.removesuffix(".npy") + ".json" for n in names)})
    return Manifest(None, set())


def check_not_inside(out_dir: Where, files: list[InputFile], *, what: str = "embeddings") -> None:
    """CorpusError when an input lies inside the output folder: its blocks would be read as input next time."""
    root = Location.of(out_dir, "-o").identity.rstrip("/") + "/"
    inside = [f.path for f in files if Location.of(f.path).identity.startswith(root)]
    if inside:
        raise CorpusError(
            f"-o {out_dir}: the input {inside[0]} is inside the output directory; "
            f"write the {what} to a directory of their own"
        )


def is_embeddings_array(location: Location) -> bool:
    """Whether the .npy file at `location` (local or in a store) is what `embed -o FILE.npy` writes, a whole (N,
    D) array of floats, by its header (read alone) and its size."""
    from numpy.lib import format as npy

    try:
        with location.open_input() as handle:
            version = npy.read_magic(handle)
            header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
            shape, _, dtype = header(handle)
            start = handle.tell()
    except (OSError, ValueError):
        return False
    return len(shape) == 2 and dtype.kind == "f" and location.size() >= start + math.prod(shape) * dtype.itemsize


def fingerprints(
    files: list[InputFile],
    model_sha256: str,
    *,
    lang: str,
    column: str,
    dtype: str,
    block_rows: int,
    backend: str,
    max_chars: int,
) -> tuple[str, str]:
    """(the output's fingerprint, the job's). The output's: of the inputs (name, size, sha256), the model and
    the options, as before the job's existed (torch and no sentence cut: the fingerprint of before that too),
    so that an output of unchanged inputs is this one's. The job's: the same less the inputs' bytes, which each
    block's record holds for its own (`input_sha256`): a rerun of the same job over a changed input is not one
    of "other inputs", and embeds again only the blocks whose input changed (`embed.blocks.completed`)."""
    options = {"model": model_sha256, "lang": lang, "column": column, "dtype": dtype, "block_rows": block_rows}
    cut = sum(f.cut for f in files)
    output = fingerprint(
        {
            "inputs": [[f.path, f.bytes, f.sha256] for f in files],
            **options,
            **({"backend": backend} if backend != "torch" else {}),
            **({"max_chars": max_chars} if cut else {}),
        }
    )
    job = fingerprint({"inputs": [f.path for f in files], **options, "backend": backend, "max_chars": max_chars})
    return output, job


def make_manifest(
    files: list[InputFile],
    records: list[store.BlockRecord],
    model: EmbedModel,
    lang: str,
    dtype: str,
    dim: int,
    config: Mapping[str, JsonValue],
    fp: tuple[str, str],
    job: EmbedJob,
) -> store.StoreManifest:
    """The manifest (`store_writer.make_manifest`, this job's under `meta`, `fp` its two fingerprints), once
    every block's rows and empty lines add up to the inputs'; AssertionError otherwise."""
    rows, empty = sum(r.rows for r in records), sum(r.empty or 0 for r in records)
    if rows != sum(f.rows for f in files) or empty != sum(f.empty for f in files):
        raise AssertionError(
            f"blocks hold {rows} sentences ({empty} empty), the inputs "
            f"{sum(f.rows for f in files)} ({sum(f.empty for f in files)})"
        )
    sources = [BlockSource.model_validate(r.model_dump()) for r in records]
    meta = EmbedMeta(
        fingerprint=fp[0],
        job_fingerprint=fp[1],
        lang=lang,
        empty=empty,
        inputs=files,
        model=model,
        sources=sources,
        job=job,
        config=config,
    )
    return store_writer.make_manifest(
        records, languages=[lang], dim=dim, dtype=dtype, meta=meta.model_dump(mode="json")
    )
