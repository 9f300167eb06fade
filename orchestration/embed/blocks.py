"""`interlingua embed`'s blocks in its output folder: those of a plan written already (a killed job resumes from
them), or, with --force, the other embeddings they replace (`completed`); whether the new ones are staged
(`replacement`); and the one embedding job that writes those left, each as it comes (`embed_blocks`).

Replacing other embeddings, the previous output stays whole until the new one is: locally the blocks are staged
beside the folder and swapped in by the commit, a failed run's staging discarded (`core.stage.run`). A store
renames nothing: there the previous output's own files are removed first and the new blocks written in place,
each with its record, so that a killed run resumes as any other.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TypedDict

from core import ownership, storage
from core.location import Location
from core.output import OutputFolder
from evaluation import store
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
    out_dir: storage.Where, fp: str, blocks: list[BlockSpec], force: bool
) -> tuple[set[int], list[str] | None]:
    """The blocks of this plan already written, and None; or, with `force` over embeddings of other inputs,
    model or options (or the earlier layout), no block and the entries they consist of, to replace once the
    new output is whole (`replacement`). ForeignDataError when the folder holds anything but embeddings
    (never removed, even with `force`); CorpusError for other embeddings without `force`. The blocks a killed
    run left half-written are removed."""
    scanned, manifest = scan_records(out_dir), read_own_manifest(out_dir)  # each record read once
    found = output_folder(out_dir, (scanned, manifest)).check_replaceable()
    stale = [*sorted(scanned.legacy), *(name for name, record in scanned.records.items() if record.fingerprint != fp)]
    if manifest.legacy or (manifest.current is not None and manifest.current.meta.get("fingerprint") != fp):
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
            storage.delete_file(storage.join(out_dir, name))  # a block a killed run left half-written
    wanted = {store.block_name(b.index): b for b in blocks}
    return {
        wanted[record.name].index
        for record in scanned.records.values()
        if record.name in wanted and all(f"{lang}/{record.name}.npy" in found for lang in record.sha256)
    }, None


def replacement(out: OutputFolder, previous: list[str] | None) -> bool:
    """Whether the blocks are staged: when they replace other embeddings (`previous`, the folder's entries, from
    `completed`) in a local folder, they are written in a staging folder beside it, swapped in whole by the
    commit (`core.stage.run`). Otherwise they are written in the folder itself; in a store, which renames
    nothing, the previous embeddings are removed here first, their own files alone."""
    if previous is None:
        return False
    if out.location.local_path is None:  # a store renames nothing
        ownership.remove_ours(out.location, previous, keep_root=True)
        return False
    return True


def embed_blocks(
    pending: list[BlockSpec],
    target: Location,
    fp: str,
    model_dir: Path,
    job: ActorJob,
    actors: int,
    cpus: int,
    use_gpu: bool,
) -> None:
    """The blocks still to do, through the one embedding job (`batch.pool`), a block per batch, each written
    into `target` (local or a URI) as it comes, its record after it."""
    import ray.data

    if target.local_path is not None:
        target.local_path.mkdir(parents=True, exist_ok=True)
    specs = {b.index: b for b in pending}

    def write(row: dict[str, Any]) -> store.BlockRecord:  # a row of `BlockEmbedFn`'s, as Ray Data hands it over
        spec = specs[int(row["index"])]
        vectors = cell_vectors(row["vectors"], row["rows"], row["dim"], job["dtype"])
        return save_input_block(str(target), spec, job["lang"], vectors, int(row["empty"]), fp)

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
