"""`interlingua embed`'s blocks in its output folder: those of a plan written already (a killed job resumes from
them), or, with --force, the other embeddings they replace (`completed`); whether the new ones are staged
(`replacement`); and the one embedding job that writes those left, each as it comes (`embed_blocks`).

Replacing other embeddings, the previous output stays whole until the new one is: locally the blocks are staged
beside the folder and swapped in by the commit, a failed run's staging discarded (`core.stage.run`). A store
renames nothing: there the previous output's own files are removed first and the new blocks written in place,
each with its record, so that a killed run resumes as any other.

A block is reused only when the hash of its input still matches: its record holds the sha256 of the input its
actor read (which the actor checked against the plan's, `inputs.read_block_text`), and a rerun keeps it only
when the block planned now has that sha256. So an input rewritten since (the same files, other lines) has its
changed blocks embedded again and keeps the others; "other inputs" (other files, model or options: the job's
fingerprint) still need --force.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

from core import ownership
from core.location import Location, Where
from core.output import OutputFolder
from evaluation import store, store_writer
from orchestration.adapters.cluster import data_job
from orchestration.batch.actors import BlockEmbedFn, save_input_block
from orchestration.batch.pool import cell_vectors, run_actors, ship_model
from orchestration.embed.folder import MANIFEST, TMP_BLOCK, output_folder, read_own_manifest, scan_records
from orchestration.embedding.inputs import BlockSpec, CorpusError


class ActorJob(TypedDict):
    """What every `BlockEmbedFn` actor is made with, beside the shipped model."""

    lang: str
    column: str
    dtype: str
    max_tokens: int
    device: str
    threads: int  # CPU threads of one actor
    backend: str  # the engine the driver resolved (`embedding.backends.resolve`)
    storage_env: dict[str, str]  # the driver's object store settings: the actors read URI inputs from it


def completed(
    out_dir: Where, fp: tuple[str, str], blocks: list[BlockSpec], force: bool
) -> tuple[set[int], list[str] | None]:
    """The blocks of this plan already written, and None; or, with `force` over embeddings of other inputs,
    model or options (or the earlier layout), no block and the entries they consist of, to replace once the
    new output is whole (`replacement`). `fp`: the output's and the job's fingerprints (`folder.fingerprints`).
    A block is written already when its record vouches for this plan's block (`_reusable`: the same job, lines
    and input sha256), so that an input changed since (same names, other bytes) has only its changed blocks
    embedded again (`_release`). ForeignDataError when the folder holds anything but embeddings (never removed,
    even with `force`); CorpusError for other embeddings without `force`. The blocks a killed run left
    half-written are removed."""
    folder = Location.of(out_dir)
    scanned, manifest = scan_records(folder), read_own_manifest(folder)  # each record read once
    found = output_folder(folder, (scanned, manifest)).check_replaceable()
    records = scanned.records.values()
    stale = [*sorted(scanned.legacy), *(f"{r.name}.json" for r in records if not _same_job(r.model_dump(), fp))]
    current = manifest.current
    if manifest.legacy or (current is not None and not _same_job(current.meta, fp)):
        stale.append(MANIFEST)
    if stale and not force:
        raise CorpusError(
            f"{out_dir} holds embeddings of other inputs, model or options ({stale[0]}); "
            "pass --force to replace them, or choose another output directory"
        )
    if stale:
        return set(), found
    for name in found:
        if TMP_BLOCK.fullmatch(name):
            folder.join(name).delete()  # a block a killed run left half-written
    wanted = {store.block_name(b.index): b for b in blocks}
    done = {
        wanted[r.name].index
        for r in records
        if r.name in wanted
        and _reusable(r, wanted[r.name], fp[1])
        and all(f"{lang}/{r.name}.npy" in found for lang in r.sha256)
    }
    _release(folder, list(records), current is not None, wanted, done)
    return done, None


def _same_job(fields: Mapping[str, Any], fp: tuple[str, str]) -> bool:
    """Whether a block's record, or a manifest's `meta` (`fields`), is of this job: of these very inputs (an
    earlier version's too, which had no job fingerprint), or of the same job over inputs changed since."""
    return fields.get("fingerprint") == fp[0] or fields.get("job_fingerprint") == fp[1]


def _reusable(record: store.BlockRecord, spec: BlockSpec, job: str) -> bool:
    """Whether a block's record vouches for the planned block `spec`: the same job, the same lines of the same
    input, and the sha256 its actor read of them the one planned now. An earlier version's record, which holds
    no input sha256, vouches for none: its block is embedded again."""
    return (
        record.job_fingerprint == job
        and record.input_sha256 == spec.sha256
        and (record.source, record.first_line, record.rows) == (spec.path, spec.first + 1, spec.rows)
    )


def _release(
    folder: Location,
    records: list[store.BlockRecord],
    manifest: bool,
    wanted: dict[str, BlockSpec],
    done: set[int],
) -> None:
    """Before any block is written again in place: the manifest removed (the folder is no whole output until
    the new one is written, last), the record of each block to embed again made to vouch for no input first (a
    run killed while it rewrites the block leaves a record no rerun takes for its new arrays), and the blocks past
    the plan's end (an input that got shorter) removed, their arrays before their record."""
    redo = [r for r in records if r.name in wanted and wanted[r.name].index not in done]
    beyond = [r for r in records if r.name not in wanted]
    if manifest and (beyond or len(done) < len(wanted)):
        (folder / MANIFEST).delete()
    for record in redo:
        if record.input_sha256 is not None:
            store_writer.write_record(folder, record.model_copy(update={"input_sha256": None}))
    for record in beyond:
        ownership.remove_ours(
            folder, [*(f"{lang}/{record.name}.npy" for lang in record.sha256), f"{record.name}.json"], keep_root=True
        )


def replacement(out: OutputFolder, previous: list[str] | None) -> bool:
    """Whether the blocks are staged: when they replace other embeddings (`previous`, the folder's entries, from
    `completed`) in a local folder, they are written in a staging folder beside it, swapped in whole by the
    commit (`core.stage.run`). Otherwise they are written in the folder itself; in a store, which renames
    nothing, the previous embeddings are removed here first, their own files alone."""
    if previous is None:
        return False
    if not out.location.renames:
        ownership.remove_ours(out.location, previous, keep_root=True)
        return False
    return True


def embed_blocks(
    pending: list[BlockSpec],
    target: Location,
    fp: tuple[str, str],
    model_dir: Path,
    job: ActorJob,
    actors: int,
    cpus: int,
    use_gpu: bool,
) -> None:
    """The blocks still to do, through the one embedding job (`batch.pool`), a block per batch, each written
    into `target` (local or a URI) as it comes, its record after it (`fp`: the run's two fingerprints).
    CorpusError, once, for a block whose input changed after it was planned (its actor's `error`)."""
    import ray.data

    target.make_folder()
    specs = {b.index: b for b in pending}

    def write(row: dict[str, Any]) -> store.BlockRecord:  # a row of `BlockEmbedFn`'s, as Ray Data hands it over
        if row["error"]:  # the actor could not read its block as planned (`inputs.read_block_text`)
            raise CorpusError(str(row["error"]))
        spec = specs[int(row["index"])]
        vectors = cell_vectors(row["vectors"], row["rows"], row["dim"], job["dtype"])
        return save_input_block(
            str(target), spec, job["lang"], vectors, int(row["empty"]), fp, str(row["input_sha256"])
        )

    with data_job():  # a task that a dying node failed is run again
        dataset = ray.data.from_items([dataclasses.asdict(b) for b in pending], override_num_blocks=len(pending))
    run_actors(
        dataset,
        BlockEmbedFn,
        {**job, "model": ship_model(model_dir, job["backend"])},
        write=write,
        rows=sum(b.rows for b in pending),
        rows_of=lambda r: r.rows,
        actors=min(actors, len(pending)),
        cpus=cpus,
        use_gpu=use_gpu,
        batch_size=1,
    )
