"""Every MLflow call of the project (the rest never imports mlflow).

Runs live in the experiment `tracking.experiment` of the tracking store
`tracking.uri`: the embedded default is an sqlite file under runs/ (artifacts
beside it), or any tracking server (`http://host:5000`).
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Mapping

log = logging.getLogger(__name__)


def resolve_uri(uri: str) -> str:
    """Make a relative sqlite or file store absolute, so Ray workers elsewhere reach the same store."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(uri[len("sqlite:///"):]).resolve())
    if "://" not in uri:
        return str(Path(uri).resolve())
    return uri


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    return MlflowClient(tracking_uri=uri)


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """{'train': {'lr': 0.001}} -> {'train.lr': '0.001'} (MLflow params are flat strings)."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = str(value)
    return out


def experiment_id(uri: str, name: str) -> str:
    client = _client(uri)
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    location = None
    if uri.startswith("sqlite:///"):  # artifacts beside the database, not in the caller's cwd
        location = Path(uri[len("sqlite:///"):]).parent.joinpath("mlartifacts").as_uri()
    return client.create_experiment(name, artifact_location=location)


def start_run(
    uri: str, experiment: str, run_name: str, params: Mapping[str, Any], *,
    resume_run_id: str | None = None, parent_run_id: str | None = None, tags: Mapping[str, str] | None = None,
) -> str:
    """A new run with `params` logged, or `resume_run_id` set RUNNING again. Returns the run id."""
    from mlflow.exceptions import MlflowException
    from mlflow.entities import Param

    client = _client(uri)
    if resume_run_id:
        try:
            client.update_run(resume_run_id, status="RUNNING")
            return resume_run_id
        except MlflowException:
            log.warning("MLflow run %s not found in %s; starting a new one", resume_run_id, uri)
    all_tags = {"mlflow.runName": run_name, **(tags or {})}
    if parent_run_id:
        all_tags["mlflow.parentRunId"] = parent_run_id
    run = client.create_run(experiment_id(uri, experiment), run_name=run_name, tags=all_tags)
    flat = [Param(k, v[:6000]) for k, v in flatten(params).items()]
    for start in range(0, len(flat), 100):
        client.log_batch(run.info.run_id, params=flat[start:start + 100])
    return run.info.run_id


def log_metrics(uri: str, run_id: str, metrics: Mapping[str, float], step: int) -> None:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    batch = [Metric(key, float(value), now, step) for key, value in metrics.items()]
    _client(uri).log_batch(run_id, metrics=batch)


def log_artifacts(uri: str, run_id: str, local_dir: str | os.PathLike, artifact_path: str | None = None) -> None:
    _client(uri).log_artifacts(run_id, str(local_dir), artifact_path)


def log_artifact(uri: str, run_id: str, path: str | os.PathLike, artifact_path: str | None = None) -> None:
    _client(uri).log_artifact(run_id, str(path), artifact_path)


def end_run(uri: str, run_id: str, status: str) -> None:
    """status: FINISHED, FAILED or KILLED."""
    _client(uri).set_terminated(run_id, status=status)


def get_run(uri: str, run_id: str):
    return _client(uri).get_run(run_id)


def metric_history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in _client(uri).get_metric_history(run_id, key)]
