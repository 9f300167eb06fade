"""`interlingua translate` at corpus scale: text and Parquet files -> translated text blocks, a Ray Data job.

    result = translate_corpus(["corpus/*.txt"], "out", source="en", target="fr", model_dir=model, config=...)

    out/part-00000.txt   the translations of one block of sentences, one line per input line, in input order
    out/part-00000.json  its record, written after it: the source file, first line, rows, empty lines, the
                         text's sha256, the sha256 of the input it was translated from, the job's fingerprint
    out/manifest.json    written last, when the counts add up: the languages, beam, rows, the model (its
                         model.safetensors sha256), the inputs (sizes, sha256, lines), each block, the config

The inputs are planned as `embed` plans them (`inputs.plan_blocks`: one streaming pass that checks UTF-8), and
one job (`batch.pool.run_actors`) hands the blocks to an actor pool of `BlockTranslateFn`
(`runtime.embed_actors`, `runtime.cpus_per_task` CPUs or a GPU each): each actor loads the model's translator
once, reads its block from its file (checked against the plan's sha256: an input rewritten after planning is
refused, "run again"), encodes it and decodes every vector, greedy or by beam search. The driver writes each
block as it comes, whole or not at all, then its record.

A row stays a row: an empty line is translated as an empty line (counted), and a line longer than
`serve.max_sentence_chars` is cut to it (counted, and warned about) as `embed` cuts it. A rerun of the same
inputs, model and options keeps every block whose record vouches for the input planned now and whose text
still has the sha256 its record holds, so a killed job resumes from the blocks it wrote; an input rewritten
since has its changed blocks translated again. A folder holding other translations (other inputs, model,
languages or options) is refused; with `force` their files (the folder's own, nothing else) are removed first
and the job runs in the folder as into a new one. One writer at a time (`lock.output_lock`).

The output folder is an `OutputFolder` of `TranslationsKind`: a user's file anywhere in it is refused before
any work, and the blocks are written in place through `OutputFolder.writing`, so that a run killed at any
point leaves every file it wrote known for the product's. Inputs, the output and the model may be URIs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from core import connection, ownership
from core.dataset import file_sha256, fingerprint
from core.location import Location, Where
from core.output import OutputFolder
from evaluation.store import block_name  # the one block naming: part-NNNNN
from orchestration.adapters import model_dir as model_files
from orchestration.embed.folder import EmbedModel, check_not_inside
from orchestration.embedding.inputs import (
    BlockSpec,
    CorpusError,
    InputFile,
    log_plan,
    plan_blocks,
    resolve_inputs,
    warn_cut,
)

log = logging.getLogger("interlingua.translate")

FORMAT: Literal["interlingua-translations/1"] = "interlingua-translations/1"
MANIFEST = "manifest.json"
_BLOCK = re.compile(r"part-\d{5}\.(txt|json)")


class TranslationRecord(BaseModel):
    """`<out>/part-NNNNN.json`: one block's completion record, written after its text."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["interlingua-translations/1"] = FORMAT
    name: str
    index: int
    source: str  # the input file
    kind: str  # "text" or "parquet"
    first_line: int  # 1-based line (row) of the block's first sentence in its file
    rows: int
    empty: int  # empty input lines, translated as empty lines
    sha256: str  # of part-NNNNN.txt
    input_sha256: str  # of the input the block was translated from, as its actor read it
    job_fingerprint: str


class TranslateJob(BaseModel):
    """The options the blocks were translated with."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    column: str
    block_rows: int
    beam: int
    max_chars: int
    actors: int
    cpus_per_actor: int
    use_gpu: bool
    max_tokens: int


class TranslationsManifest(BaseModel):
    """`<out>/manifest.json`, written last: the output is whole."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["interlingua-translations/1"] = FORMAT
    source_lang: str
    target_lang: str
    rows: int
    empty: int
    cut: int  # input lines cut to `job.max_chars` characters before they were translated
    job_fingerprint: str  # of the inputs' names, the model and the options: a rerun of another job is refused
    model: EmbedModel
    inputs: list[InputFile]
    blocks: list[TranslationRecord]
    job: TranslateJob
    config: dict[str, JsonValue] = {}  # the resolved run config


@dataclasses.dataclass
class CorpusTranslated:
    out_dir: str
    rows: int  # lines translated, all blocks
    empty: int  # of them empty
    blocks: int
    computed: int  # blocks translated by this run (the others were complete already)
    seconds: float


class TranslationsKind:
    """The translate job's output as an output kind (`core.output.Kind`): its manifest, the records that are its
    own (they parse as `TranslationRecord`) with their text blocks, and the blocks the manifest names (a killed
    write's temporary file beside one of them is the output layer's to tell)."""

    what = "-o"
    marker = MANIFEST
    advice = "give a new or empty output folder for the translations"

    def ours(self, folder: Location) -> Callable[[str], bool]:
        records, manifest = read_records(folder), read_manifest(folder)
        own = {f"{name}.json" for name in records} | {f"{name}.txt" for name in records}
        if manifest is not None:
            own |= {MANIFEST, *(f"{b.name}.txt" for b in manifest.blocks), *(f"{b.name}.json" for b in manifest.blocks)}
        return own.__contains__  # a killed write's temporary file beside one of them: `ownership.check_only_ours`


def output_folder(out_dir: Where) -> OutputFolder:
    return OutputFolder(out_dir, TranslationsKind())


def read_records(folder: Location) -> dict[str, TranslationRecord]:
    """{block name: its record} of every part-NNNNN.json of the folder that is this job's record."""
    records = {}
    try:
        names = folder.files()
    except FileNotFoundError:  # no folder yet
        return {}
    for name in names:
        if not (_BLOCK.fullmatch(name) and name.endswith(".json")):
            continue
        try:
            record = TranslationRecord.model_validate(folder.join(name).read_json())
        except (OSError, ValueError, ValidationError):
            continue  # not a record of ours
        if f"{record.name}.json" == name:
            records[record.name] = record
    return records


def read_manifest(folder: Location) -> TranslationsManifest | None:
    try:
        return TranslationsManifest.model_validate((folder / MANIFEST).read_json())
    except (OSError, ValueError, ValidationError):
        return None


def open_translations(out_dir: Where) -> tuple[TranslationsManifest, list[str]]:
    """A finished output's manifest and every translated line in input order, each block checked against the
    sha256 the manifest holds; CorpusError naming the first that is missing or changed."""
    folder = Location.of(out_dir, "-o")
    manifest = read_manifest(folder)
    if manifest is None:
        raise CorpusError(f"{out_dir}: no finished translations (no {MANIFEST} of interlingua translate)")
    lines: list[str] = []
    for block in manifest.blocks:
        where = folder.join(f"{block.name}.txt")
        data = where.read_bytes() if where.exists() else None
        if data is None or hashlib.sha256(data).hexdigest() != block.sha256:
            raise CorpusError(f"{where}: missing or changed since the translation wrote it; translate again")
        lines += data.decode("utf-8").split("\n")[:-1]
    return manifest, lines


def translate_corpus(
    inputs: Sequence[str],
    out_dir: str,
    *,
    source: str,
    target: str,
    model_dir: str | Path,
    config: Mapping[str, JsonValue],
    beam: int = 1,
    column: str = "text",
    block_rows: int = 2000,
    max_chars: int,
    actors: int = 1,
    cpus_per_actor: int = 1,
    use_gpu: bool = False,
    max_tokens: int = 8000,
    force: bool = False,
    ray_address: str | None = None,
    dashboard: bool = False,
    worker_niceness: int = 0,
) -> CorpusTranslated:
    """Translate every sentence of `inputs` (files, directories, globs; local or URIs) from `source` into
    `target` by the model directory `model_dir`, into blocks in `out_dir` (see the module), on the Ray cluster
    at `ray_address` when blocks are left to do. CorpusError on bad input or an `out_dir` that holds other
    translations (`force`: those are removed first, the folder's own files alone); NoDecoder / UnknownLanguage
    for languages the model cannot translate."""
    from orchestration.adapters.lock import output_lock

    with output_lock(out_dir, "translate"):
        started = time.monotonic()
        local_model = model_files.fetch(model_dir)
        _check_languages(local_model, source, target)  # on the driver: before any input is read or Ray started
        out = output_folder(out_dir)
        out.check_replaceable()  # a user's file in the folder is refused at once
        files, blocks = plan_blocks(resolve_inputs(inputs), column=column, block_rows=block_rows, max_chars=max_chars)
        check_not_inside(out_dir, files, what="translations")
        model = EmbedModel(
            dir=Location.of(model_dir).text, model_sha256=file_sha256(local_model / model_files.MODEL_FILE)
        )
        job = TranslateJob(
            column=column,
            block_rows=block_rows,
            beam=beam,
            max_chars=max_chars,
            actors=actors,
            cpus_per_actor=cpus_per_actor,
            use_gpu=use_gpu,
            max_tokens=max_tokens,
        )
        job_fp = fingerprint(
            {
                "inputs": [f.path for f in files],
                "model": model.model_sha256,
                "source": source,
                "target": target,
                **job.model_dump(include={"column", "block_rows", "beam", "max_chars"}),
            }
        )
        folder = out.location
        records = read_records(folder)
        previous = read_manifest(folder)
        other = [r.name for r in records.values() if r.job_fingerprint != job_fp]
        if other or (previous is not None and previous.job_fingerprint != job_fp):
            if not force:
                raise CorpusError(
                    f"-o {out_dir} holds translations of other inputs, model, languages or options "
                    f"({other[0] + '.json' if other else MANIFEST}); pass --force to replace them, or give another "
                    "output folder"
                )
            _remove_translations(folder, out.check_replaceable())
            records, previous = {}, None
        done = {b.index for b in blocks if _reusable(folder, records.get(block_name(b.index)), b)}
        pending = [b for b in blocks if b.index not in done]
        total, cut = sum(f.rows for f in files), sum(f.cut for f in files)
        log_plan(log, files, blocks, block_rows, len(done), max_chars)
        warn_cut(f"{len(files)} inputs", cut, total, max_chars)
        if not pending and previous is not None and len(previous.blocks) == len(blocks):
            return CorpusTranslated(out_dir, previous.rows, previous.empty, len(blocks), 0, time.monotonic() - started)
        names = [f"{block_name(b.index)}.{suffix}" for b in blocks for suffix in ("txt", "json")]
        with out.held(), out.writing(names):
            beyond = [n for r in records for n in (f"{r}.txt", f"{r}.json") if f"{r}.json" not in names]
            if beyond:  # blocks of an earlier run past this plan's end (an input that got shorter): ours, stale
                ownership.remove_ours(folder, [n for n in beyond if folder.join(n).exists()], keep_root=True)
            if pending:
                _translate_blocks(
                    pending,
                    folder,
                    local_model,
                    job_fp,
                    dict(
                        source=source,
                        target=target,
                        column=column,
                        beam=beam,
                        max_tokens=max_tokens,
                        device="cuda" if use_gpu else "cpu",
                        threads=cpus_per_actor,
                        storage_env=connection.environment(),
                    ),
                    actors=actors,
                    cpus=cpus_per_actor,
                    use_gpu=use_gpu,
                    cluster=dict(address=ray_address, dashboard=dashboard, worker_niceness=worker_niceness),
                    local_inputs=[f.path for f in files if Location.of(f.path).on_this_host],
                )
            found = read_records(folder)
            made = [found[block_name(b.index)] for b in blocks]
            manifest = _manifest(files, made, model, source, target, cut, job_fp, job, config)
            out.commit_in_place(manifest.model_dump_json(indent=2).encode() + b"\n")
        return CorpusTranslated(
            out_dir, manifest.rows, manifest.empty, len(blocks), len(pending), time.monotonic() - started
        )


def _remove_translations(folder: Location, entries: list[str]) -> None:
    """Remove the folder's own `entries` (other translations) before a --force run writes its own: first recorded
    as the product's (`ownership.begin_writes`: a run killed meanwhile leaves nothing unvouched for), each
    block's text before its record, the manifest last."""
    names = [name for name in entries if name != ownership.JOURNAL]
    ownership.begin_writes(folder, names)
    ordered = sorted(names, key=lambda name: (name == MANIFEST, name.endswith(".json"), name))
    ownership.remove_ours(folder, ordered, keep_root=True, last=MANIFEST)


def _check_languages(model_dir: Path, source: str, target: str) -> None:
    from orchestration.embedding.translator import SentenceTranslator

    translator = SentenceTranslator.load(model_dir)
    translator.check_source(source)
    translator.check_target(target)


def _reusable(folder: Location, record: TranslationRecord | None, spec: BlockSpec) -> bool:
    """Whether the block `spec` planned now is written already: its record vouches for the same lines of the
    same input (the sha256 its actor read is the one planned now) and its text still has the sha256 recorded."""
    if record is None or record.input_sha256 != spec.sha256:
        return False
    if (record.source, record.first_line, record.rows) != (spec.path, spec.first + 1, spec.rows):
        return False
    text = folder.join(f"{record.name}.txt")
    return text.exists() and text.sha256() == record.sha256


def _translate_blocks(
    pending: list[BlockSpec],
    folder: Location,
    model_dir: Path,
    job_fp: str,
    actor: dict[str, Any],
    *,
    actors: int,
    cpus: int,
    use_gpu: bool,
    cluster: dict[str, Any],
    local_inputs: list[str],
) -> None:
    """The blocks left, through one actor-pool job (`batch.pool.run_actors`), each written into `folder` as it
    comes, its record after it. CorpusError, once, for a block whose input changed after it was planned."""
    import ray.data

    from orchestration.adapters.cluster import check_every_node_reaches, data_job, ensure_ray
    from orchestration.batch.actors import BlockTranslateFn
    from orchestration.batch.pool import run_actors, ship_model

    ensure_ray(
        cluster["address"],
        log_to_driver=False,
        dashboard=cluster["dashboard"],
        worker_niceness=cluster["worker_niceness"],
    )
    if local_inputs:  # the actors read the inputs, on any node
        check_every_node_reaches(input=local_inputs[0])
    folder.make_folder()
    specs = {b.index: b for b in pending}

    def write(row: dict[str, Any]) -> TranslationRecord:
        if row["error"]:
            raise CorpusError(str(row["error"]))
        spec = specs[int(row["index"])]
        assert row["input_sha256"] == spec.sha256, spec  # the actor refuses any other (`read_block_text`)
        data = str(row["text"]).encode("utf-8")
        assert data.count(b"\n") == spec.rows, (spec, data.count(b"\n"))
        name = block_name(spec.index)
        folder.join(f"{name}.txt").replace_bytes(data)  # whole or not at all, then its record
        record = TranslationRecord(
            name=name,
            index=spec.index,
            source=spec.path,
            kind=spec.kind,
            first_line=spec.first + 1,
            rows=spec.rows,
            empty=int(row["empty"]),
            sha256=hashlib.sha256(data).hexdigest(),
            input_sha256=spec.sha256,
            job_fingerprint=job_fp,
        )
        folder.join(f"{name}.json").write_json(record.model_dump(mode="json"))
        return record

    with data_job():  # a task that a dying node failed is run again
        dataset = ray.data.from_items([dataclasses.asdict(b) for b in pending], override_num_blocks=len(pending))
    run_actors(
        dataset,
        BlockTranslateFn,
        {**actor, "model": ship_model(model_dir)},
        write=write,
        rows=sum(b.rows for b in pending),
        rows_of=lambda r: r.rows,
        actors=min(actors, len(pending)),
        cpus=cpus,
        use_gpu=use_gpu,
        batch_size=1,
        verb="translated",
    )


def _manifest(
    files: list[InputFile],
    records: list[TranslationRecord],
    model: EmbedModel,
    source: str,
    target: str,
    cut: int,
    job_fp: str,
    job: TranslateJob,
    config: Mapping[str, JsonValue],
) -> TranslationsManifest:
    """The manifest, once every block's rows add up to the inputs'; AssertionError otherwise."""
    rows = sum(r.rows for r in records)
    if rows != sum(f.rows for f in files):
        raise AssertionError(f"blocks hold {rows} sentences, the inputs {sum(f.rows for f in files)}")
    return TranslationsManifest(
        source_lang=source,
        target_lang=target,
        rows=rows,
        empty=sum(r.empty for r in records),
        cut=cut,
        job_fingerprint=job_fp,
        model=model,
        inputs=files,
        blocks=records,
        job=job,
        config=dict(config),
    )
