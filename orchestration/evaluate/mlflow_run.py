"""An evaluation as an MLflow run nested under the training run: its metrics per pair and averaged, the
report files as artifacts, the error matrix as a table, and what it searched as the run's dataset input."""

from __future__ import annotations

from pathlib import Path

from evaluation.report import FILES
from orchestration.adapters import lineage, tracking
from orchestration.adapters import model_dir as model_files
from orchestration.adapters.tracker import Tracker
from orchestration.config import Config


def log_run(
    config: Config,
    out_dir: Path,
    named: dict[str, dict[str, float]],
    averages: dict[str, float],
    steps: int | None,
    size: int,
    label: str | None,
    parent_run_id: str | None,
    name: str,
    tags: dict[str, str],
    read: lineage.DataInput,
    translated: dict[str, dict[str, float]] | None = None,
    transferred: dict[str, dict] | None = None,
    cross_version: dict | None = None,
) -> str:
    """The evaluation as an MLflow run nested under the training run (or `parent_run_id`): what it `read` as
    its dataset input, the error matrix as a table too; the run's id."""
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
    if translated:  # BLEU and chrF per pair and averaged (`evaluate.translation`)
        from orchestration.evaluate.translation import averages as translation_averages

        metrics.update({f"eval/{metric}/{pair}": v for pair, m in translated.items() for metric, v in m.items()})
        metrics.update({f"eval/{name}": v for name, v in translation_averages(translated).items()})
    if transferred:  # balanced accuracy per (train, test) language and averaged (`evaluate.transfer`)
        from orchestration.evaluate.transfer import transfer_metrics

        metrics.update(transfer_metrics(transferred))
    if cross_version:  # this model's queries among the old model's vectors (`train.compatible_with`)
        from orchestration.evaluate.compatibility import cross_version_metrics

        metrics.update(cross_version_metrics(cross_version))
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
    ) as run:
        run.log_metrics(metrics, 0)
        for file in FILES:
            run.log_artifact(out_dir / file)
        run.log_table(lineage.error_table(out_dir / "error_matrix.csv"), lineage.MATRIX_TABLE)
        if translated:
            from orchestration.evaluate.translation import table

            languages = sorted({pair.split("-", 1)[0] for pair in translated})
            for metric in ("bleu", "chrf"):
                run.log_table(table(translated, languages, metric), f"translation_{metric}.json")
        if transferred:
            from orchestration.evaluate.transfer import transfer_table

            for task, result in transferred.items():
                run.log_table(transfer_table(result), f"transfer_{task}.json")
    return run.id
