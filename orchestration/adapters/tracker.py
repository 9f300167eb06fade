"""The tracking store a run's config names, resolved once: `Tracker.of(config)` in every stage.

    tracker = Tracker.of(config)
    tracker.check_reachable()                  # before any long work
    with tracker.run(config.name, config.to_dict(), stage="train") as run:
        run.log_metrics({...}, step)           # run.id: the MLflow run's id, for records and child runs
    tracker.champion()                          # the registered version holding the champion alias, or None

`uri` is `tracking.uri` made absolute (`tracking.resolve_uri`: a relative sqlite store, so that Ray workers
elsewhere reach the same one), `experiment` is `tracking.experiment`, `model_name` the registered model
(`registry.model_name`, or the config's name). Workers get the plain URI (`WorkerJob.mlflow_uri`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestration.adapters import registry, tracking

if TYPE_CHECKING:
    from orchestration.config import Config


def registered_name(config: Config) -> str:
    """The registered model of `config`: `registry.model_name`, or the config's name."""
    return config.registry.model_name or config.name


@dataclass(frozen=True)
class TrackedRun:
    """One MLflow run of a tracking store: what a stage logs to, instead of a (store, run id) pair. Every call
    goes through `tracking` (its fence: a holder whose lease was taken over logs nothing more)."""

    uri: str
    id: str

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """ValueError for a non-finite value (`tracking.log_metrics`)."""
        tracking.log_metrics(self.uri, self.id, metrics, step)

    def log_artifacts(self, local_dir: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        tracking.log_artifacts(self.uri, self.id, local_dir, artifact_path)

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        tracking.log_artifact(self.uri, self.id, path, artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        tracking.log_text(self.uri, self.id, text, artifact_file)

    def log_table(self, data: Mapping[str, list], artifact_file: str) -> None:
        tracking.log_table(self.uri, self.id, data, artifact_file)

    def describe(self, text: str) -> None:
        tracking.describe(self.uri, self.id, text)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        tracking.set_tags(self.uri, self.id, tags)

    def get(self):
        """MLflow's `Run` (its data: params, metrics, tags)."""
        return tracking.get_run(self.uri, self.id)

    def end(self, status: str) -> None:
        """status: FINISHED, FAILED or KILLED (`tracking.end_run`): for a run no `Tracker.run` of this process
        ends, such as one a killed command left RUNNING."""
        tracking.end_run(self.uri, self.id, status)


@dataclass(frozen=True)
class Tracker:
    uri: str
    experiment: str
    model_name: str

    @classmethod
    def of(cls, config: Config) -> Tracker:
        return cls(tracking.resolve_uri(config.tracking.uri), config.tracking.experiment, registered_name(config))

    def check_reachable(self) -> None:
        """ConnectionError (or TrackingLoginError) now, before any long work, when the store cannot be used."""
        tracking.check_reachable(self.uri)

    @contextlib.contextmanager
    def run(self, run_name: str, params: Mapping[str, Any], *, stage: str, **options: Any) -> Iterator[TrackedRun]:
        """A stage's MLflow run in the experiment, as its handle (`tracking.run`: its `options` too, and how the
        run ends: FINISHED, KILLED on an interrupt, FAILED on any error)."""
        with tracking.run(self.uri, self.experiment, run_name, params, stage=stage, **options) as run_id:
            yield TrackedRun(self.uri, run_id)

    def attach(self, run_id: str) -> TrackedRun:
        """The handle of a run this store holds, started elsewhere (a parent run, a resumed one)."""
        return TrackedRun(self.uri, run_id)

    def search_runs(self, filter_string: str = "", max_results: int = 100) -> list:
        """The experiment's runs, newest first (`tracking.search_runs`)."""
        return tracking.search_runs(self.uri, self.experiment, filter_string, max_results)

    def champion(self):
        """The registered version of the model holding the champion alias, or None (`registry.champion`)."""
        return registry.champion(self.uri, self.model_name)
