"""`interlingua embed` at corpus scale: text and Parquet files -> embedding blocks, a Ray Data job.

    result = embed_corpus(["corpus/*.txt"], Path("out"), lang="en", model_dir=Path("runs/x/train/model"))

    out/<lang>/part-00000.npy  (n, D) the embeddings of one block of sentences, in input order
    out/part-00000.json        its record, written after it: source file, first line, rows, empty lines,
                               sha256, the run's fingerprints, the sha256 of the input it was embedded from
    out/manifest.json          written last, when the counts add up: languages [lang], dim, dtype, rows,
                               blocks, and under `meta` the inputs (sizes, sha256, lines), the model (its
                               model.safetensors sha256), each block's source, the totals and the resolved config

The one block format of `evaluation.store`, without rows files: `StoredEmbeddings.open(out)` reads it,
locally or at a URI. The driver plans the blocks (`inputs.plan_blocks`: one streaming pass that
checks UTF-8), then the one embedding job (`batch.pool`) hands the blocks to
an actor pool of `BlockEmbedFn` (`runtime.embed_actors`, `runtime.cpus_per_task`
CPUs or a GPU each): each actor loads `SentenceEmbedder` once (the
normalization and sentencepiece model of training), reads its block from the
file and embeds it; the driver writes it (`actors.save_input_block`: `store_writer.save_block`) whole or not at
all, then its record. A rerun of the same inputs, model and
options skips every block whose record is there and vouches for the input planned
now (its sha256, as its actor read it), so a killed job resumes, and an input
rewritten since has its changed blocks embedded again; an actor whose block
changed after it was planned refuses it ("run again"). Other inputs in the same
folder, or an output of the earlier layout (`part-N.npy` beside its record), are
refused unless `force`, which replaces them whole (`embed.blocks`).

Inputs, the output and the model may be URIs (`s3://bucket/emb`): the actors, on any node, get the model's
files through Ray's object store and read their blocks from the inputs' store; the driver writes each block
into the output as it comes, its record after it, and the manifest last. A rerun reads the records from the
store, so it resumes from the blocks written and never downloads a block. Local inputs on a cluster that
spans hosts are refused before any work: the actors on the other hosts cannot read them.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import JsonValue

from core import connection, stage
from core.dataset import file_sha256
from core.location import Location
from core.output import Staging
from evaluation import store, store_writer
from orchestration.adapters import model_dir as model_files
from orchestration.adapters.cluster import check_every_node_reaches, ensure_ray
from orchestration.embed.blocks import ActorJob, completed, embed_blocks, replacement
from orchestration.embed.folder import (
    EmbedJob,
    EmbedModel,
    check_not_inside,
    fingerprints,
    make_manifest,
    output_folder,
    scan_records,
)
from orchestration.embedding.inputs import (
    MAX_CHARS,
    CorpusError,
    log_plan,
    plan_blocks,
    read_lines,
    resolve_inputs,
    warn_cut,
)

log = logging.getLogger(__name__)


@dataclass
class CorpusResult:
    out_dir: str | Path
    rows: int  # sentences embedded, all blocks
    empty: int  # of them empty
    blocks: int
    computed: int  # blocks embedded by this run (the others were complete already)
    seconds: float


def embed_corpus(
    inputs: Sequence[str],
    out_dir: str | Path,
    *,
    lang: str,
    model_dir: str | Path,
    config: Mapping[str, JsonValue],
    column: str = "text",
    dtype: str = "float32",
    block_rows: int = 20000,
    actors: int = 1,
    cpus_per_actor: int = 1,
    use_gpu: bool = False,
    max_tokens: int = 8000,
    force: bool = False,
    ray_address: str | None = None,
    backend: str = "torch",
    dashboard: bool = False,
    worker_niceness: int = 0,
) -> CorpusResult:
    """Embed every sentence of `inputs` (files, directories, globs; local or URIs) into blocks in `out_dir`
    (a local folder or a URI; see the module) by the model directory `model_dir` (local or a URI), on the
    Ray cluster at `ray_address` (`orchestration.adapters.cluster.ensure_ray`) when blocks are left to do;
    CorpusError on bad input or an `out_dir` holding other embeddings (without `force`). `backend`:
    runtime.backend, resolved here once (`embedding.backends.resolve`) for every actor; the engine that ran is in
    the manifest and the fingerprint (another engine's blocks are never taken for this one's). One writer at a
    time: a second `embed` into the same folder exits 5 naming the holder (`lock.output_lock`)."""
    from orchestration.adapters.lock import output_lock

    with output_lock(out_dir, "embed"):
        return _embed_corpus(
            inputs,
            out_dir,
            lang=lang,
            model_dir=model_dir,
            config=config,
            column=column,
            dtype=dtype,
            block_rows=block_rows,
            actors=actors,
            cpus_per_actor=cpus_per_actor,
            use_gpu=use_gpu,
            max_tokens=max_tokens,
            force=force,
            ray_address=ray_address,
            backend=backend,
            dashboard=dashboard,
            worker_niceness=worker_niceness,
        )


def _embed_corpus(
    inputs: Sequence[str],
    out_dir: str | Path,
    *,
    lang: str,
    model_dir: str | Path,
    config: Mapping[str, JsonValue],
    column: str,
    dtype: str,
    block_rows: int,
    actors: int,
    cpus_per_actor: int,
    use_gpu: bool,
    max_tokens: int,
    force: bool,
    ray_address: str | None,
    backend: str,
    dashboard: bool,
    worker_niceness: int,
) -> CorpusResult:
    from orchestration.embedding.backends import resolve

    started = time.monotonic()
    local_model = model_files.fetch(model_dir)
    model_path = model_files.check_readable(local_model)  # on the driver: a damaged model is named before Ray
    device = "cuda" if use_gpu else "cpu"
    engine = resolve(local_model, backend, device=device)
    languages, dim = _model_languages(model_path)
    if lang not in languages:
        raise CorpusError(f"the model knows {languages}, not {lang!r}")
    out = output_folder(out_dir)
    out.check_replaceable()  # before the inputs are read: a user's folder is refused at once
    max_chars = max_sentence_chars(config)
    files, blocks = plan_blocks(resolve_inputs(inputs), column=column, block_rows=block_rows, max_chars=max_chars)
    check_not_inside(out_dir, files)
    cut = sum(f.cut for f in files)
    model = EmbedModel(dir=Location.of(model_dir).text, model_sha256=file_sha256(model_path))
    fp = fingerprints(  # the output's (as before the job's existed) and the job's
        files,
        model.model_sha256,
        lang=lang,
        column=column,
        dtype=dtype,
        block_rows=block_rows,
        backend=engine,
        max_chars=max_chars,
    )
    done, previous = completed(out_dir, fp, blocks, force)
    staged = replacement(out, previous)  # with --force over other embeddings
    pending = [b for b in blocks if b.index not in done]
    total = sum(f.rows for f in files)
    log_plan(log, files, blocks, block_rows, len(done), max_chars)
    warn_empty(sum(f.empty for f in files), total)
    warn_cut(f"{len(files)} inputs", cut, total, max_chars)

    def write(target: Location) -> store.StoreManifest:
        """The blocks left to do, written into `target`, and the manifest that names them (its commit writes it
        last)."""
        if pending:
            ensure_ray(ray_address, log_to_driver=False, dashboard=dashboard, worker_niceness=worker_niceness)
            local = [f.path for f in files if Location.of(f.path).on_this_host]
            if local:  # the actors read the inputs, on any node
                check_every_node_reaches(input=local[0])
            job = ActorJob(
                lang=lang,
                column=column,
                dtype=dtype,
                max_tokens=max_tokens,
                device=device,
                threads=cpus_per_actor,
                backend=engine,
                storage_env=connection.environment(),
            )  # the actors read URI inputs from the same store
            embed_blocks(pending, target, fp, local_model, job, actors, cpus_per_actor, use_gpu)
        found = scan_records(target).records
        records = [found[f"{store.block_name(b.index)}.json"] for b in blocks]
        options = EmbedJob(
            column=column,
            block_rows=block_rows,
            actors=actors,
            cpus_per_actor=cpus_per_actor,
            use_gpu=use_gpu,
            max_tokens=max_tokens,
            backend=engine,
        )
        return make_manifest(files, records, model, lang, dtype, dim, config, fp, options)

    def made(staging: Staging) -> stage.Manifest[store.StoreManifest]:
        manifest = write(staging.root)
        return stage.Manifest(manifest, store_writer.manifest_bytes(manifest))

    if staged:  # the old output stays whole until the commit; a failed run's staging is discarded (`core.stage`)
        manifest = stage.run(stage.always(out), made).manifest
    else:  # in place: a killed run resumes from the blocks it wrote, into the folder as it was checked
        with out.held():
            manifest = write(out.location)
            out.commit_in_place(store_writer.manifest_bytes(manifest))
    return CorpusResult(
        out_dir, manifest.rows, sum(f.empty for f in files), len(blocks), len(pending), time.monotonic() - started
    )


def load_embeddings(out_dir: str | Path) -> np.ndarray:
    """(N, D) every row of the finished embeddings at `out_dir` (local or a URI), in input order."""
    stored = store.StoredEmbeddings.open(out_dir)
    return stored.rows(stored.languages[0])


def embed_in_process(
    embedder, names: Sequence[str], lang: str, *, chunk: int = 10000, max_chars: int = MAX_CHARS
) -> tuple[np.ndarray, int]:
    """Small inputs without Ray: the lines of text files (local or URIs, or "-", stdin) embedded here, chunk
    by chunk, each cut to `max_chars` characters (`inputs.read_lines`, which counts them in the log): ((N, D)
    float32, empty lines). CorpusError on bad UTF-8, naming the file and line."""
    chunks, batch, empty = [], [], 0
    for name in names:
        with open(sys.stdin.fileno(), "rb", closefd=False) if name == "-" else Location.of(name).open_input() as handle:
            for line in read_lines(handle, "<stdin>" if name == "-" else name, max_chars=max_chars):
                batch.append(line)
                empty += not line
                if len(batch) == chunk:
                    chunks.append(embedder.embed(batch, lang))
                    log.info("embedded %d sentences", chunk * len(chunks))
                    batch = []
    if batch:
        chunks.append(embedder.embed(batch, lang))
    warn_empty(empty, sum(len(c) for c in chunks))
    return (np.concatenate(chunks) if chunks else np.zeros((0, embedder.model.embedding_dim), np.float32)), empty


def max_sentence_chars(config: Mapping[str, JsonValue]) -> int:
    """The most characters of a sentence the model is given: the run config's serve.max_sentence_chars (the
    server's limit), its default without one."""
    serve = config.get("serve")
    value = serve.get("max_sentence_chars") if isinstance(serve, dict) else None
    return value if isinstance(value, int) and value > 0 else MAX_CHARS


def warn_empty(empty: int, total: int) -> None:
    """Empty lines are embedded (row i stays line i), all as the same vector: say so. CorpusError when every
    line is empty: there is nothing to embed."""
    if total and empty == total:
        raise CorpusError(f"all {total} input lines are empty: nothing to embed")
    if empty:
        log.warning(
            "%d of %d lines are empty: each is embedded as end-of-sentence alone, the same vector "
            "(kept so that row i is line i); drop empty lines first if they are not wanted",
            empty,
            total,
        )


def _model_languages(model_path: Path) -> tuple[list[str], int]:
    model, _ = model_files.load(model_path)
    return model.languages, model.embedding_dim
