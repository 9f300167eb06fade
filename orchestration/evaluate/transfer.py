"""Zero-shot transfer in `evaluate` (`evaluate.transfer`): each task's classifiers trained on one language's
stored vectors of the split and tested on every language's (`evaluation.transfer`), for the split's report,
metrics.json and the MLflow run.

    results = transfer_results(config, store, languages)   # {"bible_books": {"accuracy": {"en-fr": 0.81, ...}, ...}}
    metrics = transfer_metrics(results)                     # {"eval/transfer/bible_books/en-fr": 0.81, ...}

A pair p-q is the classifier trained on p, tested on q; p-p is its accuracy in its own language (on held-out
chapters). The averages: `own` over p-p, `cross` over p-q with p != q; `gap` the most any language falls below
its training language's own accuracy.
"""

from __future__ import annotations

import logging

import numpy as np

from evaluation.transfer import TASKS, TransferError, transfer_matrix
from orchestration.config import Config

log = logging.getLogger(__name__)
Results = dict[str, dict]


def transfer_results(config: Config, store, languages: list[str]) -> Results:
    """Every task of `evaluate.transfer` on the stored split; {} without one. EvaluateError (exit 2) when a
    training language is not evaluated, or a task's labels cannot serve (none, one class)."""
    from orchestration.evaluate import EvaluateError

    e = config.evaluate
    if not e.transfer:
        return {}
    train = e.transfer_languages if e.transfer_languages is not None else languages
    unknown = [lang for lang in train if lang not in languages]
    if unknown:
        raise EvaluateError(f"evaluate.transfer_languages: {unknown} are not evaluated; choose among {languages}")
    keys = [str(k) for k in np.asarray(store.column("key")).astype(str)]
    vectors = {lang: np.asarray(store.rows(lang), np.float32) for lang in languages}
    out: Results = {}
    for name in e.transfer:
        task = TASKS[name]
        labels, groups = task.label(keys)
        try:
            result = transfer_matrix(vectors, labels, groups, train_languages=train, name=f"evaluate.transfer {name}")
        except TransferError as exc:
            raise EvaluateError(f"{exc} ({sum(1 for x in labels if x)} of {len(keys)} tuples labelled)") from None
        named = result.named()
        cross = [v for (p, q), v in result.accuracy.items() if p != q]
        averages = {
            "own": float(np.mean([result.accuracy[(p, p)] for p in train])),
            **({"cross": float(np.mean(cross))} if cross else {}),
            "gap": max(result.gap(p) for p in train),
        }
        out[name] = {
            "languages": list(languages),
            "accuracy": {k: round(v, 4) for k, v in named.items()},
            "averages": {k: round(v, 4) for k, v in averages.items()},
            "classes": result.classes,
            "train_rows": result.train_rows,
            "test_rows": result.test_rows,
        }
        log.info(
            "transfer %s: %d classes, trained on %d tuples, tested on %d; balanced accuracy %.1f %% in the training "
            "language, %.1f %% across languages",
            name,
            len(result.classes),
            result.train_rows,
            result.test_rows,
            100 * averages["own"],
            100 * averages.get("cross", averages["own"]),
        )
    return out


def transfer_metrics(results: Results) -> dict[str, float]:
    """The MLflow metrics of `transfer_results`: each pair's balanced accuracy and the task's averages."""
    metrics = {}
    for name, result in results.items():
        metrics.update({f"eval/transfer/{name}/{pair}": v for pair, v in result["accuracy"].items()})
        metrics.update({f"eval/transfer/{name}/avg_{k}": v for k, v in result["averages"].items()})
    return metrics


def transfer_table(result: dict) -> dict[str, list]:
    """One task's accuracies as a table for MLflow's UI: a column `train`, then one per test language."""
    accuracy, languages = result["accuracy"], result["languages"]
    trained = [p for p in languages if f"{p}-{p}" in accuracy]
    return {"train": trained, **{q: [accuracy.get(f"{p}-{q}") for p in trained] for q in languages}}
