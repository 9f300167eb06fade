"""`interlingua evaluate`: embed a held-out split with Ray Data, search it in shards with Ray tasks.

    result = evaluate(load_config("configs/bible6-cpu.yaml"))

1. `resolve_encoder`: the model directory (default: the run's trained model) or the USE baseline.
2. The stage cache: an evaluation of the same model file, data (the sha256 of every file read,
   verified against the manifest first) and `evaluate` config (its fingerprint in `state.json`) is
   returned as it is, unless `force`.
3. `embed_split` (Ray Data actors) writes the embeddings block by block to
   `<run_dir>/eval/<split>/embeddings/` (`evaluation.store`: per language, rows in key order).
4. `measure`: every ordered pair searched by `evaluation.xsim.search_pairs`
   on Ray tasks, each reading one block of queries and one of `evaluate.shards`
   candidate shards from disk; the merged top-k go to `<out_dir>/search/`, then the metrics.
5. `evaluation.report` files and an MLflow run nested under the training run.

The driver holds a block of queries at a time, never a split's embeddings or texts
(`tests.memory` measures its peak memory).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core import ownership, storage, transfer
from core.dataset import Dataset, file_sha256, fingerprint
from evaluation.metrics import subset_averages
from evaluation.report import FILES, check_output, format_matrix, write_report
from evaluation.store import EmbeddingsMeta, StoredEmbeddings
from evaluation.xsim import approximate_recall, pair_metrics, search_pairs
from orchestration.adapters import lineage, tracking
from orchestration.adapters import model_dir as model_files
from orchestration.adapters.cluster import RayExecutor, check_every_node_reaches, ensure_ray, shipped
from orchestration.adapters.progress import Progress
from orchestration.adapters.state import read_state, write_state
from orchestration.adapters.tracker import Tracker
from orchestration.config import Config, ConfigError, evaluated_languages
from orchestration.embed import backends
from orchestration.evaluate import EvaluateError, EvaluationRecord
from orchestration.evaluate.embedding import embed_split, embed_texts

log = logging.getLogger(__name__)

STATE_FILE = "state.json"


@dataclass
class Encoder:
    """What is evaluated: a model file, or the USE baseline (`model_path` None)."""

    model_path: Path | None
    languages: list[str]  # the evaluated ones
    steps: int | None  # the optimizer steps of the model's training (None: the USE baseline, or unknown)
    reencode: bool = False  # the dataset's token ids are of another tokenizer: the model reads the text
    known: list[str] | None = None  # every language the model embeds (None: the USE baseline, many)
    backend: str = "torch"  # the engine that runs it (`embed.backends`, resolved: never "auto")


@dataclass
class EvalResult:
    matrix: dict[tuple[str, str], float]
    pairs: dict[str, dict[str, float]]
    averages: dict[str, float]
    languages: list[str]
    run_id: str
    out_dir: Path | str  # a URI stays a str
    skipped: bool = False
    data: str = ""  # what was searched: the dataset's fingerprint, or a test set's

    def format_matrix(self) -> str:
        return format_matrix(self.matrix, self.averages, self.languages)


def evaluate(
    config: Config,
    *,
    model_dir: Path | None = None,
    label: str | None = None,
    parent_run_id: str | None = None,
    force: bool = False,
    testset: str | None = None,
    reencode: bool = False,
) -> EvalResult:
    """Evaluate a model directory (default: the run's trained model) or the USE baseline on the
    dataset's `evaluate.split`, or on the `evaluate.testsets` entry named `testset`.

    `label` names the output (`<run_dir>/eval/<split or testset-NAME>-<label>`) and the MLflow run. An
    evaluation of the same model file, data and evaluate config is returned as it is unless `force`. On
    the split, a model of another tokenizer than the dataset's is refused (ModelDirError), or with
    `reencode` fed the split's text encoded with its own tokenizer; a test set is always read as text by
    the model's own tokenizer.
    """
    encoder = resolve_encoder(config, model_dir, reencode=reencode, own_text=testset is not None)
    label = label or (None if config.evaluate.encoder == "model" else config.evaluate.encoder)
    name = f"testset-{testset}" if testset else config.evaluate.split
    location = storage.join(config.eval_dir, f"{name}-{label}" if label else name)
    if not storage.is_uri(location):
        return _evaluate(config, encoder, Path(location), name, label, parent_run_id, force, testset)
    with mirrored(location) as work:  # the search reads its embeddings memory-mapped: a local copy
        result = _evaluate(config, encoder, work, name, label, parent_run_id, force, testset)
    return dataclasses.replace(result, out_dir=location)


@contextmanager
def mirrored(location: str) -> Iterator[Path]:
    """A local working copy of the output folder at the URI `location` (in this host's temp folder), filled
    from it first; on success its files are uploaded, state.json last (the commit a rerun reads), and the
    files of an earlier evaluation that the new one no longer has are removed (they were checked to be ours)."""
    with tempfile.TemporaryDirectory(prefix="interlingua-eval-") as tmp:
        work = Path(tmp) / "out"
        before = set(transfer.download_dir(location, work))
        yield work
        names = transfer.upload_dir(work, location, last=(STATE_FILE,))
        stale = sorted(before - set(names))
        if stale:
            ownership.remove_ours(location, stale, keep_root=True)


def _evaluate(
    config: Config,
    encoder: Encoder,
    out_dir: Path,
    name: str,
    label: str | None,
    parent_run_id: str | None,
    force: bool,
    testset: str | None,
) -> EvalResult:
    texts = _testset(config, testset, encoder) if testset else None
    languages = texts.languages if texts else encoder.languages
    check_output(out_dir, record=STATE_FILE)  # a user's file there is never overwritten
    data, verified = _verified_data(config, texts)  # before the cache: it must not answer for changed files
    fp = eval_fingerprint(config, encoder, data, verified)
    state = read_state(out_dir / STATE_FILE, EvaluationRecord) if not force else None
    if state and state.fingerprint == fp and (out_dir / "metrics.json").is_file():
        log.info("%s: this model was evaluated on this data already", out_dir)
        return _cached(out_dir, languages, state.run_id, data)
    # the run is logged after the work: an unreachable store must fail now, not after it and minutes of retries
    Tracker.of(config).check_reachable()
    ensure_ray(
        config.runtime.ray_address,
        log_to_driver=False,
        dashboard=config.runtime.ray_dashboard,
        worker_niceness=config.runtime.worker_niceness,
    )
    if not texts:
        check_every_node_reaches(dataset_dir=str(config.data_dir))  # Ray Data reads the split on any node
    meta = EmbeddingsMeta(model=model_identity(config, encoder), split=name, data=data, backend=encoder.backend)
    if texts:
        store = embed_texts(
            config, texts.table, encoder.model_path, languages, out_dir / "embeddings", meta, backend=encoder.backend
        )
    else:
        store = embed_split(
            config,
            encoder.model_path,
            languages,
            out_dir / "embeddings",
            meta=meta,
            own_text=encoder.reencode,
            backend=encoder.backend,
        )
    log.info(
        "%s: embedded %d tuples x %d languages; searching %d pairs in %d shards",
        name,
        len(store),
        len(languages),
        len(languages) * (len(languages) - 1),
        config.evaluate.shards,
    )
    pairs = measure(config, store, out_dir / "search")
    matrix = {pair: m["error"] for pair, m in pairs.items()}
    averages = {"all": float(np.mean(list(matrix.values()))), **subset_averages(matrix, languages)}
    named = {f"{p}-{q}": m for (p, q), m in pairs.items()}
    write_report(out_dir, matrix, named, averages, languages, len(store))
    tags = {
        tracking.DATA_TAG: data,
        tracking.BACKEND_TAG: encoder.backend,
        **({tracking.TESTSET_TAG: testset} if testset else {}),
    }
    run_id = _log(
        config,
        out_dir,
        named,
        averages,
        encoder.steps,
        len(store),
        label,
        parent_run_id,
        name,
        tags,
        lineage.evaluated_input(config.data_dir, name, texts),
    )
    write_state(out_dir / STATE_FILE, EvaluationRecord(fingerprint=fp, run_id=run_id, data=data))
    ownership.end_writes(out_dir)  # the state file vouches for the report now
    return EvalResult(matrix, named, averages, languages, run_id, out_dir, data=data)


def _verified_data(config: Config, texts) -> tuple[str, dict[str, str]]:
    """What is searched (its fingerprint, as tagged) and the sha256 of every file read, checked: the test
    set's (checked when it was read), or the split's shards and spm.model, verified here on the driver,
    before any Ray work. DatasetError naming a file that differs from the manifest."""
    if texts:
        return texts.data, texts.verified
    split = (config.evaluate.split,)
    data = Dataset.open(config.data_dir).verify(split)
    return data.fingerprint, data.sha256(split)


def _testset(config: Config, name: str, encoder: Encoder):
    from orchestration.evaluate.testsets import load_testset

    spec = next((t for t in config.evaluate.testsets if t.name == name), None)
    if spec is None:
        raise EvaluateError(
            f"no test set {name!r} in evaluate.testsets "
            f"({', '.join(t.name for t in config.evaluate.testsets) or 'none'})"
        )
    if spec.files is None:
        return load_testset(spec, encoder.languages)
    # files: the languages the encoder knows; the baseline (known None): the test set's own
    return load_testset(spec, list(spec.files) if encoder.known is None else encoder.known)


def resolve_encoder(
    config: Config, model_dir: Path | None, *, reencode: bool = False, own_text: bool = False
) -> Encoder:
    """The evaluated model and the languages measured; EvaluateError when there is no model or the dataset
    lacks its languages, ModelDirError when its files are damaged or its tokenizer is not the dataset's
    (unless `reencode`: then the model reads the split's text with its own normalization and spm.model).
    `own_text`: the model reads text with its own tokenizer (a test set), so the dataset's tokenizer does not
    matter."""
    data = Dataset.open(config.data_dir)
    if config.evaluate.encoder == "use":
        available = config.train.languages or data.languages
        return Encoder(None, _languages(config, available), None)
    model_dir = model_files.fetch(model_dir or model_files.default(config.train_dir)).resolve()
    model_path = model_dir / model_files.MODEL_FILE
    if not model_path.is_file():
        raise EvaluateError(f"{model_path}: no trained model; run `interlingua train` first or pass --model")
    # `auto`: the fastest engine whose embeddings are the model's own (an export's fp32), never its int8
    r = config.runtime
    backend = backends.resolve(model_dir, r.backend, device="cuda" if r.use_gpu else "cpu", exact=True)
    if own_text:
        model_files.verify(model_files.check(model_dir))  # it reads the text with its own spm.model: the right one?
        languages = model_files.load(model_path)[0].languages
        return Encoder(
            model_path,
            _languages(config, languages),
            model_files.trained_steps(model_dir),
            known=languages,
            backend=backend,
        )
    mismatch = False
    try:
        model_files.check_tokenizer(model_dir, data)
    except model_files.TokenizerMismatch:
        if not reencode:
            raise
        mismatch = True
        log.warning(
            "%s was trained with another tokenizer than %s: re-encoding the split's text with its own "
            "normalization and %s",
            model_dir,
            config.data_dir,
            model_files.SPM_FILE,
        )
    languages = model_files.load(model_path)[0].languages
    lacking = [lang for lang in languages if lang not in data.languages]
    if lacking and config.evaluate.languages is None:
        raise EvaluateError(
            f"{model_path} embeds {languages}; {config.data_dir} lacks {lacking}: set "
            f"evaluate.languages to some of {data.languages}"
        )
    available = [lang for lang in languages if lang in data.languages]
    return Encoder(
        model_path, _languages(config, available), model_files.trained_steps(model_dir), mismatch, languages, backend
    )


def eval_fingerprint(config: Config, encoder: Encoder, data: str, verified: dict[str, str]) -> str:
    """What an evaluation depends on: the model file, the data searched (a fingerprint) and the sha256 of
    the files read (`verified`: a shard changed under an unchanged manifest is other data), the evaluate
    config (but the list of test sets: adding one changes no other evaluation), and the engine when it is not
    torch (an evaluation made before the engines existed keeps its fingerprint)."""
    return fingerprint(
        {
            "model": model_identity(config, encoder),
            "data": data,
            "files": verified,
            "evaluate": config.evaluate.model_dump(exclude={"testsets"}),
            **({"backend": encoder.backend} if encoder.backend != "torch" else {}),
        }
    )


def model_identity(config: Config, encoder: Encoder) -> str:
    """The evaluated model's identity: its file's sha256, or the baseline's name."""
    return file_sha256(encoder.model_path) if encoder.model_path else config.evaluate.encoder


def measure(config: Config, store: StoredEmbeddings, results_dir: Path) -> dict[tuple[str, str], dict[str, float]]:
    """Every ordered pair's metrics, searched on Ray tasks that read the stored embeddings (`cluster.shipped`; results
    written to `results_dir`); with an approximate index also its recall against an exact search of
    the first `evaluate.recall_queries` queries."""
    e = config.evaluate
    # the tasks run on any node: the embeddings of this host's disk (the run dir, or the working copy of a
    # bucket's) go to them through Ray's object store
    executor = RayExecutor(config.runtime.cpus_per_task)
    store = shipped(store)
    k = max(5, e.margin_k)
    languages = len(store.languages)
    progress = Progress(len(store) * languages * (languages - 1), verb="searched", unit="queries")
    results = search_pairs(
        store,
        metric=e.metric,
        shards=e.shards,
        k=k,
        index=e.index,
        executor=executor,
        results_dir=results_dir,
        progress=progress.update,
    )
    progress.close()
    pairs = pair_metrics(results, store.hashes(), metric=e.metric, margin_k=e.margin_k)
    if e.index != "flat":
        queries = min(e.recall_queries, len(store))
        exact = search_pairs(store, metric=e.metric, shards=e.shards, k=k, queries=queries, executor=executor)
        for pair, recall in approximate_recall(results, exact).items():
            pairs[pair].update(recall)
    return pairs


def _languages(config: Config, available: list[str]) -> list[str]:
    try:
        return evaluated_languages(config, available)
    except ConfigError as exc:
        raise EvaluateError(str(exc)) from None


def _cached(out_dir: Path, languages: list[str], run_id: str, data: str) -> EvalResult:
    record = json.loads((out_dir / "metrics.json").read_text())
    matrix = {tuple(k.split("-", 1)): v["error"] for k, v in record["pairs"].items()}
    return EvalResult(matrix, record["pairs"], record["averages"], languages, run_id, out_dir, skipped=True, data=data)


def _log(
    config: Config,
    out_dir: Path,
    named,
    averages,
    steps: int | None,
    size: int,
    label: str | None,
    parent_run_id: str | None,
    name: str,
    tags: dict[str, str],
    read,
) -> str:
    """The evaluation as an MLflow run nested under the training run (or `parent_run_id`): what it `read` (a
    `lineage.DataInput`) as its dataset input, the error matrix as a table too."""
    tracker = Tracker.of(config)
    encoder = config.evaluate.encoder
    train_run = None
    if encoder == "model" and not label:
        train_run = model_files.training_run_id(config.train_dir)
    suffix = f"-{label}" if label else ""
    rename = {"error": "xsim_error"}
    metrics = {f"eval/{rename.get(name, name)}/{pair}": value for pair, m in named.items() for name, value in m.items()}
    metrics["eval/xsim_error"] = averages["all"]
    metrics.update({f"eval/xsim_error/avg_{name}": v for name, v in averages.items() if name != "all"})
    metrics["eval/sentences"] = size
    with tracker.run(
        f"{config.name}-eval-{name}{suffix}",
        config.to_dict(),
        stage="evaluate",
        parent_run_id=parent_run_id or train_run,
        tags={
            tracking.ENCODER_TAG: encoder,
            tracking.MODEL_STEP_TAG: str(steps),
            **tags,
            **({tracking.TRAIN_RUN_TAG: train_run} if train_run else {}),
        },
        inputs=[read],
    ) as run_id:
        tracking.log_metrics(tracker.uri, run_id, metrics, 0)
        for file in FILES:
            tracking.log_artifact(tracker.uri, run_id, out_dir / file)
        tracking.log_table(tracker.uri, run_id, lineage.error_table(out_dir / "error_matrix.csv"), lineage.MATRIX_TABLE)
    return run_id
