"""Every MLflow call of the project (the rest never imports mlflow).

Runs live in the experiment `tracking.experiment` of the tracking store
`tracking.uri`: the embedded default is an sqlite file under runs/ (artifacts
beside it), or any tracking server (`http://host:5000`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from core import fencing
from orchestration.adapters import lineage
from orchestration.adapters.tracking_store import CREDENTIALS_ENV as CREDENTIALS_ENV
from orchestration.adapters.tracking_store import TrackingLoginError as TrackingLoginError
from orchestration.adapters.tracking_store import check_reachable as check_reachable
from orchestration.adapters.tracking_store import client as _client
from orchestration.adapters.tracking_store import how_to_browse as how_to_browse
from orchestration.adapters.tracking_store import resolve_uri as resolve_uri

log = logging.getLogger(__name__)

# The tags the project sets on its runs and registered versions (what `compare`, `run` and the champion
# decision search by).
STAGE_TAG = "interlingua.stage"  # prepare, train, evaluate, tune, mine, pipeline
DATA_TAG = "interlingua.data"  # the fingerprint of what was evaluated
TESTSET_TAG = "interlingua.testset"
ENCODER_TAG = "interlingua.encoder"
BACKEND_TAG = "interlingua.backend"  # the engine an evaluation ran the model on (torch, onnx, onnx-int8)
MODEL_STEP_TAG = "interlingua.model_step"
TRAIN_RUN_TAG = "interlingua.train_run_id"
TUNE_TAG, TRIAL_TAG = "interlingua.tune", "interlingua.trial"
RUN_DIR_TAG = "interlingua.run_dir"
MAX_NOTE_CHARS = 7000  # MLflow 3 caps a tag's value at 8,000 characters
ALREADY_EXISTS = ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS")  # MLflow's codes for a create that lost a race


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
    """The experiment `name`, created as a model-training experiment (`lineage.EXPERIMENT_KIND_TAG`: MLflow's UI
    opens it on its runs); one that has no kind yet is given that one, a kind chosen otherwise is kept; one that
    another command created since the look-up (two commands on a fresh store) is read back, not an error."""
    from mlflow.exceptions import MlflowException

    client = _client(uri)
    found = client.get_experiment_by_name(name)
    if found is None:
        location = None
        if uri.startswith("sqlite:///"):  # artifacts beside the database, not in the caller's cwd
            location = Path(uri[len("sqlite:///") :]).parent.joinpath("mlartifacts").as_uri()
        kind = {lineage.EXPERIMENT_KIND_TAG: lineage.MODEL_TRAINING}
        try:
            return client.create_experiment(name, artifact_location=location, tags=kind)
        except MlflowException as exc:  # RESOURCE_ALREADY_EXISTS: the other command's experiment is ours
            found = client.get_experiment_by_name(name) if exc.error_code in ALREADY_EXISTS else None
            if found is None:
                raise
    if lineage.EXPERIMENT_KIND_TAG not in found.tags:
        client.set_experiment_tag(found.experiment_id, lineage.EXPERIMENT_KIND_TAG, lineage.MODEL_TRAINING)
    return found.experiment_id


def start_run(
    uri: str,
    experiment: str,
    run_name: str,
    params: Mapping[str, Any],
    *,
    resume_run_id: str | None = None,
    parent_run_id: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> str:
    """A new run with `params` logged, or `resume_run_id` set RUNNING again. Returns the run id. A new run
    carries MLflow's source tags (`lineage.source_tags`: the command, the project's version and commit)."""
    from mlflow.entities import Param
    from mlflow.exceptions import MlflowException

    client = _client(uri)
    if resume_run_id:
        try:
            client.update_run(resume_run_id, status="RUNNING")
            return resume_run_id
        except MlflowException:
            log.warning("MLflow run %s not found in %s; starting a new one", resume_run_id, uri)
    parent = None
    if parent_run_id and not lineage.from_cli():  # a run the command line did not start: its parent's source
        with contextlib.suppress(MlflowException):
            parent = client.get_run(parent_run_id).data.tags
    all_tags = {**lineage.source_tags(parent), "mlflow.runName": run_name, **(tags or {})}
    if parent_run_id:
        all_tags["mlflow.parentRunId"] = parent_run_id
    run = client.create_run(experiment_id(uri, experiment), run_name=run_name, tags=all_tags)
    flat = [Param(k, v[:6000]) for k, v in flatten(params).items()]
    for start in range(0, len(flat), 100):
        client.log_batch(run.info.run_id, params=flat[start : start + 100])
    return run.info.run_id


@contextlib.contextmanager
def run(
    uri: str,
    experiment: str,
    run_name: str,
    params: Mapping[str, Any],
    *,
    stage: str,
    resume_run_id: str | None = None,
    parent_run_id: str | None = None,
    tags: Mapping[str, str] | None = None,
    inputs: Sequence[lineage.DataInput] = (),
) -> Iterator[str]:
    """`with tracking.run(...) as run_id:` the one way a stage's MLflow run is opened (`start_run`, tagged with
    its stage, the datasets it reads logged as its dataset `inputs`) and ended: FINISHED, KILLED on an
    interrupt (SIGINT, SystemExit), FAILED on any error. Stages open theirs through `Tracker.run`, which
    yields the run's handle (`tracker.TrackedRun`)."""
    run_id = start_run(
        uri,
        experiment,
        run_name,
        params,
        resume_run_id=resume_run_id,
        parent_run_id=parent_run_id,
        tags={STAGE_TAG: stage, **(tags or {})},
    )
    try:
        lineage.log_inputs(_client(uri), run_id, inputs)
        yield run_id
    except (KeyboardInterrupt, SystemExit):
        _end_if_ours(uri, run_id, "KILLED")
        raise
    except BaseException:
        _end_if_ours(uri, run_id, "FAILED")
        raise
    end_run(uri, run_id, "FINISHED")


def _end_if_ours(uri: str, run_id: str, status: str) -> None:
    """End the run unless the run dir's lease was taken over (`core.fencing`): the command that holds it now
    resumes this very run, whose status is then its own."""
    try:
        fencing.check()
    except BaseException:  # noqa: BLE001 - the fence's own exception: the run is another holder's now
        log.warning("MLflow run %s left to the command that took the run dir's lease over", run_id)
        return
    _client(uri).set_terminated(run_id, status=status)  # `end_run` without its fence: just checked


def log_metrics(uri: str, run_id: str, metrics: Mapping[str, float], step: int) -> None:
    from mlflow.entities import Metric

    bad = {key: value for key, value in metrics.items() if not math.isfinite(value)}
    if bad:  # a nan or inf is a bug upstream (an empty split, a diverged loss): never a number to compare
        raise ValueError(f"not logged to MLflow run {run_id}: non-finite metrics {bad}")
    now = int(time.time() * 1000)
    batch = [Metric(key, float(value), now, step) for key, value in metrics.items()]
    fencing.check()  # a holder whose lease was taken over (or a worker of it) logs nothing more
    _client(uri).log_batch(run_id, metrics=batch)


def log_artifacts(uri: str, run_id: str, local_dir: str | os.PathLike, artifact_path: str | None = None) -> None:
    _client(uri).log_artifacts(run_id, str(local_dir), artifact_path)


def log_artifact(uri: str, run_id: str, path: str | os.PathLike, artifact_path: str | None = None) -> None:
    _client(uri).log_artifact(run_id, str(path), artifact_path)


def log_text(uri: str, run_id: str, text: str, artifact_file: str) -> None:
    """`text` as the run's artifact `artifact_file`: for a file that lives at a URI, not on this host."""
    _client(uri).log_text(run_id, text, artifact_file)


def log_table(uri: str, run_id: str, data: Mapping[str, list], artifact_file: str) -> None:
    """`data` (column -> values) as the run's table artifact `artifact_file` (.json), which MLflow's UI shows."""
    _client(uri).log_table(run_id, data=dict(data), artifact_file=artifact_file)


def describe(uri: str, run_id: str, text: str) -> None:
    """The run's description in MLflow's UI (markdown)."""
    _client(uri).set_tag(run_id, lineage.NOTE_TAG, text[:MAX_NOTE_CHARS])


def end_run(uri: str, run_id: str, status: str) -> None:
    """status: FINISHED, FAILED or KILLED."""
    fencing.check()
    _client(uri).set_terminated(run_id, status=status)


def get_run(uri: str, run_id: str):
    return _client(uri).get_run(run_id)


def metric_history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(step, value) for step, value, _ in metric_series(uri, run_id, key)]


def metric_series(uri: str, run_id: str, key: str) -> list[tuple[int, float, float]]:
    """(step, value, when it was logged in seconds since the epoch) of every value of a metric."""
    return [(m.step, m.value, m.timestamp / 1000) for m in _client(uri).get_metric_history(run_id, key)]


def experiment_names(uri: str) -> list[str]:
    """The names of the store's active experiments, sorted."""
    return sorted(e.name for e in _client(uri).search_experiments())


def literal(value: str) -> str:
    """`value` as a string literal of MLflow's search filter (`tags.x = {literal(v)}`). The filter has no escape
    for a quote: a value holding ' goes between double quotes; ValueError when it holds both ' and "."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise ValueError(f"{value!r}: MLflow's search filter cannot match a name holding both ' and \"; rename it")


def search_runs(uri: str, experiment: str, filter_string: str = "", max_results: int = 100) -> list:
    """Runs of an experiment, newest first ([] when the experiment does not exist)."""
    client = _client(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    return client.search_runs(
        [found.experiment_id], filter_string, max_results=max_results, order_by=["attributes.start_time DESC"]
    )


def artifacts(uri: str, run_id: str, path: str | None = None) -> list[str]:
    """The paths of a run's artifacts (under `path`)."""
    return [a.path for a in _client(uri).list_artifacts(run_id, path)]


def set_tags(uri: str, run_id: str, tags: Mapping[str, str]) -> None:
    client = _client(uri)
    for key, value in tags.items():
        client.set_tag(run_id, key, value)
