"""The cross-version check in `evaluate`: for a model trained with `train.compatible_with`, the split embedded by
the old model too (`<eval>/embeddings-compatible/`), and the new model's queries searched among the old model's
vectors of the same sentences (`evaluation.compatibility`), for the split's report, metrics.json, the MLflow run
and the champion gate.

    results = cross_version_results(config, store, model_path, languages, folder, data)
    # {"old_model": dir, "old_sha256": ..., "languages": [...], "pairs": {"en-fr": 0.03, ...},
    #  "avg_error": 0.05, "same_sentence_error": 0.0, "own_error": 0.048}

A model without that lineage has no check ({}). An old model that is gone or damaged, or whose model file is not
the one the new model was trained against, gets a warning that names it and no check: a figure against another
space would mean nothing. A store that cannot be reached fails the evaluation (nothing is cached without the
check). `own_error` is the new model's own error on the same languages and tuples, which the gate compares with.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.compatibility import averages, cross_errors
from evaluation.report import COMPATIBLE_EMBEDDINGS
from evaluation.store import EmbeddingsMeta, StoredEmbeddings
from orchestration.config import Config

log = logging.getLogger(__name__)
FOLDER = COMPATIBLE_EMBEDDINGS  # beside the model's own `embeddings/` (`evaluation.report.ReportKind`)
METRIC = "eval/cross_version"


def cross_version_results(
    config: Config, store: StoredEmbeddings, model_path: Path | None, languages: list[str], folder: Path, data: str
) -> dict:
    """The cross-version errors of the model at `model_path` against the model its lineage names (see the
    module); `store`: the new model's embeddings of the split, `folder` where the old model's go."""
    from core.dataset import Dataset
    from orchestration.adapters import model_dir as model_files
    from orchestration.evaluate.embedding import embed_split

    if model_path is None:
        return {}
    lineage = model_files.lineage(model_path.parent)
    old, recorded = lineage.get("compatible_with"), lineage.get("compatible_with_sha256")
    if not old:
        return {}
    from model.model_file import ModelFileError

    try:
        local = model_files.fetch(old)
        verified = model_files.verify(Path(local))
        old_model, _ = model_files.load(Path(local) / model_files.MODEL_FILE)
    except (model_files.ModelDirError, ModelFileError, FileNotFoundError) as exc:  # gone or damaged, not unreachable
        log.warning("%s: no cross-version check: the model it keeps the space of cannot be read (%s)", old, exc)
        return {}
    if verified["model_sha256"] != recorded:
        log.warning(
            "%s: no cross-version check: its model file (sha256 %s) is not the one this model was trained against (%s)",
            old,
            verified["model_sha256"][:12],
            str(recorded)[:12],
        )
        return {}
    common = [lang for lang in languages if lang in old_model.languages]
    if not common:
        log.warning("%s: no cross-version check: it knows none of the evaluated languages %s", old, languages)
        return {}
    own_text = verified.get("spm_sha256") != Dataset.open(config.data_dir).spm_sha256  # another tokenizer: text
    meta = EmbeddingsMeta(model=verified["model_sha256"], split=config.evaluate.split, data=data)
    stored = embed_split(
        config, Path(local) / model_files.MODEL_FILE, common, folder / FOLDER, meta=meta, own_text=own_text
    )
    new_keys = [str(k) for k in np.asarray(store.column("key")).astype(str)]
    at = {str(k): i for i, k in enumerate(np.asarray(stored.column("key")).astype(str))}
    rows = np.asarray([at[k] for k in new_keys if k in at], dtype=np.int64)  # the new store's tuples, old order
    kept = np.asarray([i for i, k in enumerate(new_keys) if k in at], dtype=np.int64)
    new = {lang: np.asarray(store.rows(lang), np.float32)[kept] for lang in common}
    old_vectors = {lang: np.asarray(stored.rows(lang), np.float32)[rows] for lang in common}
    pairs = cross_errors(new, old_vectors)
    results: dict[str, Any] = {
        "old_model": str(old),
        "old_sha256": verified["model_sha256"],
        "languages": common,
        "tuples": len(kept),
        "pairs": pairs,
        **averages(pairs),
        # the model's own error on the same languages and tuples: what the cross-version error is held against
        "own_error": averages(cross_errors(new, new))["avg_error"],
    }
    log.info(
        "cross-version: this model's queries among %s's vectors of %d tuples: %.2f %% error (same sentence %.2f %%)",
        old,
        len(kept),
        100 * results["avg_error"],
        100 * results["same_sentence_error"],
    )
    return results


def cross_version_metrics(results: dict) -> dict[str, float]:
    """The MLflow metrics of `cross_version_results`: each pair and the two averages."""
    if not results:
        return {}
    return {
        **{f"{METRIC}/{pair}": float(v) for pair, v in results["pairs"].items()},
        f"{METRIC}/avg_error": float(results["avg_error"]),
        f"{METRIC}/same_sentence_error": float(results["same_sentence_error"]),
    }
