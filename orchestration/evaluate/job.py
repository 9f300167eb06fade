"""`interlingua evaluate`: embed a held-out split with Ray Data, search it in shards with Ray tasks.

    result = evaluate(load_config("configs/bible6-cpu.yaml"))

1. `encoder.resolve_encoder`: the model directory (default: the run's trained model) or the USE baseline.
2. The stage cache (`core.stage.cached`): an evaluation of the same model file, data (the sha256 of every file
   read, verified against the manifest first) and `evaluate` config (its fingerprint in `state.json`,
   `encoder.eval_fingerprint`) is returned as it is, unless `force`. The folder's ownership is checked before
   it (a user's file is refused even when the evaluation is up to date).
3. Otherwise the evaluation is made whole in a staging folder and committed by `core.stage.run`, `state.json`
   last: no file of the previous evaluation is opened for writing (a snapshot a user hard-linked keeps its
   bytes), and the data is verified again before the commit (a dataset swapped during the run records nothing).
   `embedding.embed_split` (Ray Data actors) writes the embeddings block by block to
   `<staging>/embeddings/` (`evaluation.store`: per language, rows in key order).
4. `measure.measure`: every ordered pair searched by `evaluation.xsim.search_pairs`
   on Ray tasks, each reading one block of queries and one of `evaluate.shards`
   candidate shards from disk; the merged top-k go to `<out_dir>/search/`, then the metrics.
5. `evaluation.report` files and an MLflow run nested under the training run (`mlflow_run.log_run`),
   then `state.json`. The folder is an output of `evaluation.report.ReportKind` (`core.output`): a user's
   file there is refused before any work; in a store, the evaluation is made in a local scratch folder
   uploaded with `state.json` last.

The driver holds a block of queries at a time, never a split's embeddings or texts
(`tests.memory` measures its peak memory).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from core import stage
from core.dataset import Dataset, DatasetError
from core.location import Location
from core.output import Staging
from evaluation import report
from evaluation.metrics import subset_averages
from evaluation.report import STATE_FILE, format_matrix, write_report
from evaluation.store import EmbeddingsMeta
from orchestration.adapters import lineage, tracking
from orchestration.adapters.cluster import check_every_node_reaches, ensure_ray
from orchestration.adapters.state import read_state, state_bytes
from orchestration.adapters.tracker import Tracker
from orchestration.config import Config
from orchestration.evaluate import EvaluateError, EvaluationRecord
from orchestration.evaluate.embedding import embed_split, embed_texts
from orchestration.evaluate.encoder import Encoder, eval_fingerprint, model_identity, resolve_encoder
from orchestration.evaluate.measure import measure
from orchestration.evaluate.mlflow_run import log_run

if TYPE_CHECKING:
    from orchestration.evaluate.testsets import Testset

log = logging.getLogger(__name__)


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
    location = Location.of(config.eval_dir).join(f"{name}-{label}" if label else name)
    texts = _testset(config, testset, encoder) if testset else None
    languages = texts.languages if texts else encoder.languages
    output = report.output(location)
    output.check_replaceable()  # before the cache too: a user's file there is refused, never overwritten
    if not texts:
        output.check_apart([(config.data_dir, "data_dir")])  # never over the data it reads
    data, verified = _verified_data(config, texts)  # before the cache: it must not answer for changed files
    fp = eval_fingerprint(config, encoder, data, verified)
    evaluation = stage.Stage(output, fp, read=lambda: _record(location), fingerprint_of=lambda r: r.fingerprint)
    state = stage.cached(evaluation) if not force else None
    if state is not None:
        log.info("%s: this model was evaluated on this data already", location)
        return _cached(location, languages, state.run_id, data)
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

    made: list[EvalResult] = []

    def work(staging: Staging) -> stage.Manifest[EvaluationRecord]:
        # made whole in a staging folder (a store's: a local scratch folder), so that no file of the previous
        # evaluation is opened for writing: a snapshot a user hard-linked keeps its bytes
        result = _measure(config, encoder, staging.local, name, label, parent_run_id, testset, texts, data)
        if _verified_data(config, texts) != (data, verified):  # the data read must be the data verified
            raise DatasetError(
                f"{config.data_dir if not texts else testset}: the data changed while it was evaluated "
                "(its files no longer match the sha256s verified at the start); nothing is recorded: run again"
            )
        made.append(result)
        record = EvaluationRecord(fingerprint=fp, run_id=result.run_id, data=data)
        return stage.Manifest(record, state_bytes(record))

    stage.run(evaluation, work, force=True)  # the cache answered above
    out_dir: Path | str = location.local_path or str(location)
    return dataclasses.replace(made[0], out_dir=out_dir)


def _measure(
    config: Config,
    encoder: Encoder,
    out_dir: Path,
    name: str,
    label: str | None,
    parent_run_id: str | None,
    testset: str | None,
    texts: Testset | None,
    data: str,
) -> EvalResult:
    """Embed the split or test set into `out_dir`, search every pair, write the report and log the MLflow run."""
    languages = texts.languages if texts else encoder.languages
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
    tags = {
        tracking.DATA_TAG: data,
        tracking.BACKEND_TAG: encoder.backend,
        **({tracking.TESTSET_TAG: testset} if testset else {}),
    }
    translated = {}
    if config.evaluate.translation_rows and encoder.model_path is not None and not texts:
        from orchestration.evaluate.translation import translation_scores

        translated = translation_scores(config, encoder.model_path.parent, languages)
    transferred = {}
    if config.evaluate.transfer and not texts:
        from orchestration.evaluate.transfer import transfer_results

        transferred = transfer_results(config, store, languages)
    crossed = {}
    if encoder.model_path is not None and not texts:  # trained to keep an old model's space: how well it does
        from orchestration.evaluate.compatibility import cross_version_results

        crossed = cross_version_results(config, store, encoder.model_path, languages, out_dir, data)
    write_report(out_dir, matrix, named, averages, languages, len(store), translated, transferred, crossed)
    run_id = log_run(
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
        translated,
        transferred,
        crossed,
    )
    return EvalResult(matrix, named, averages, languages, run_id, out_dir, data=data)


def _verified_data(config: Config, texts: Testset | None) -> tuple[str, dict[str, str]]:
    """What is searched (its fingerprint, as tagged) and the sha256 of every file read, checked: the test
    set's (checked when it was read), or the split's shards and spm.model, verified here on the driver,
    before any Ray work. DatasetError naming a file that differs from the manifest."""
    if texts:
        return texts.data, texts.verified
    split = (config.evaluate.split,)
    data = Dataset.open(config.data_dir).verify(split)
    return data.fingerprint, data.sha256(split)


def _testset(config: Config, name: str, encoder: Encoder) -> Testset:
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
    if encoder.known is None:
        return load_testset(spec, list(spec.files))
    testset = load_testset(spec, encoder.known, shared=encoder.shared)
    unseen = [lang for lang in testset.languages if lang not in encoder.known]
    if unseen and encoder.model_path is not None:
        from orchestration.evaluate.testsets import check_tokenizable

        check_tokenizable(testset, unseen, encoder.model_path.parent)
    return testset


def _record(folder: Location) -> EvaluationRecord | None:
    """The folder's record (StateError when `state.json` holds none), None without one or without the report
    it vouches for: an evaluation left without its metrics.json is made again."""
    record = read_state(str(folder / STATE_FILE), EvaluationRecord)
    return record if record is not None and (folder / "metrics.json").exists() else None


def _cached(folder: Location, languages: list[str], run_id: str, data: str) -> EvalResult:
    record = (folder / "metrics.json").read_json()
    matrix = {tuple(k.split("-", 1)): v["error"] for k, v in record["pairs"].items()}
    out_dir: Path | str = folder.local_path or str(folder)
    return EvalResult(matrix, record["pairs"], record["averages"], languages, run_id, out_dir, skipped=True, data=data)
