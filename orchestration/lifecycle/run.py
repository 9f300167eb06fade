"""`interlingua run`: prepare -> train -> evaluate -> register, safe to call from a scheduler.

Each stage is skipped when its inputs and config are unchanged (content
fingerprints, as a build cache): prepare hashes its input files and config,
train its dataset and model/train config, evaluate the model file, dataset
and evaluate config, register the model file. A scheduled run with no new
data therefore does nothing expensive; new data re-runs what depends on it.

The stages are MLflow runs nested under one pipeline run. A new model is
registered and promoted or not by `champion.register_and_decide`. Then the
stores of `registry.stores` that the champion's vectors do not compare with
are embedded again by it (`lifecycle.stores`).

Exit codes (`core.errors.Exit`): 0 trained and promoted, 3 nothing to do, 4 trained but
not promoted, 5 another run holds the lock, 1 failed, 2 bad config or input.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from core.errors import Exit
from core.location import Location
from orchestration.adapters import registry, tracking
from orchestration.adapters.lock import run_lock
from orchestration.adapters.tracker import Tracker
from orchestration.config import Config

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    code: int
    message: str
    stages: dict[str, str] = field(default_factory=dict)  # stage -> "ran" | "skipped"
    champion_error: float | None = None
    challenger_error: float | None = None
    run_id: str | None = None
    matrix: str = ""  # the challenger's error matrix, as text


def run_pipeline(config: Config, *, wait: bool = False, beam_args: list[str] | None = None) -> Outcome:
    """prepare -> train -> evaluate -> register under the run dir's lock; the outcome and its exit code."""
    from orchestration.adapters.model_dir import MODEL_FILE
    from orchestration.evaluate.job import evaluate
    from orchestration.lifecycle.champion import MODEL_TAG, register_and_decide
    from orchestration.train.driver import train
    from pipelines.prepare import run_prepare
    from pipelines.runners import pipeline_options

    tracker = Tracker.of(config)
    uri = tracker.uri
    tracker.check_reachable()  # before any long work
    options = pipeline_options(beam_args or [])  # an unknown --runner: exit 2 now, not inside the stage
    if config.registry.stores:  # their inputs and outputs, before any long work
        from orchestration.lifecycle.stores import check_stores

        check_stores(config)
    run_dir = config.run_location
    with run_lock(run_dir, wait, ttl=config.runtime.lease_ttl_s):
        _close_killed_runs(tracker, run_dir)
        with tracker.run(
            f"{config.name}-pipeline", config.to_dict(), stage="pipeline", tags={tracking.RUN_DIR_TAG: run_dir}
        ) as parent:
            outcome = Outcome(Exit.FAILED, "failed", run_id=parent.id)
            prepared = run_prepare(config.prepare, config.data_dir, options=options, resolved_config=config.to_dict())
            outcome.stages["prepare"] = "skipped" if prepared.skipped else "ran"
            trained = train(config, restart_stale=True, parent_run_id=parent.id)
            outcome.stages["train"] = "skipped" if trained.skipped else "ran"
            challenger = evaluate(config, parent_run_id=parent.id)
            tested = {
                t.name: evaluate(config, parent_run_id=parent.id, testset=t.name) for t in config.evaluate.testsets
            }
            outcome.stages["evaluate"] = "skipped" if all(r.skipped for r in [challenger, *tested.values()]) else "ran"
            outcome.matrix = challenger.format_matrix()
            if config.registry.decide_on:  # the decision on a test set (e.g. a pinned one), not the split
                challenger = tested[config.registry.decide_on]
            sha = Location.of(trained.model_dir).join(MODEL_FILE).sha256()
            name = tracker.model_name
            if registry.find_version(uri, name, MODEL_TAG, sha) is not None:
                outcome.stages["register"] = "skipped"
                outcome.code, outcome.message = Exit.NOTHING_TO_DO, "nothing to do: this model was registered already"
            else:
                outcome.stages["register"] = "ran"
                decision = register_and_decide(config, name, sha, trained, challenger, parent)
                outcome.code = Exit.OK if decision.promoted else Exit.NOT_PROMOTED
                outcome.message = decision.message
                outcome.champion_error, outcome.challenger_error = decision.champion_error, decision.challenger_error
            if config.registry.stores:  # kept in the champion's space, whatever was decided (a rerun resumes them)
                from orchestration.lifecycle.stores import keep_stores

                kept = keep_stores(config, trained.model_dir)
                outcome.stages["stores"] = "ran" if kept else "skipped"
            parent.set_tags({f"stage.{k}": v for k, v in outcome.stages.items()} | {"decision": outcome.message})
            parent.describe(description(outcome))
        return outcome


def description(outcome: Outcome) -> str:
    """The pipeline run's description in MLflow's UI (markdown): the decision and why, what each stage did, and
    the challenger's error matrix when it fits (else the evaluation run's table has it)."""
    stages = ", ".join(f"{stage} {how}" for stage, how in outcome.stages.items())
    text = f"**{outcome.message}**\n\nstages: {stages}\n"
    matrix = f"\n```\n{outcome.matrix}\n```\n"
    return text + matrix if len(text + matrix) <= tracking.MAX_NOTE_CHARS else text


def _close_killed_runs(tracker: Tracker, run_dir: str) -> None:
    """Mark KILLED the pipeline runs of this run dir left RUNNING by a killed `interlingua run`, and their
    stage runs. Holding the lock proves no live process owns them; a killed training run is resumed (and set
    RUNNING again) by this run's train stage, so nothing is trained or logged twice."""
    running = "attributes.status = 'RUNNING'"
    for stale in tracker.search_runs(f"tags.`{tracking.STAGE_TAG}` = 'pipeline' and {running}"):
        if stale.data.tags.get(tracking.RUN_DIR_TAG) != run_dir:
            continue
        for child in tracker.search_runs(f"tags.`mlflow.parentRunId` = '{stale.info.run_id}' and {running}"):
            tracker.attach(child.info.run_id).end("KILLED")
        tracker.attach(stale.info.run_id).end("KILLED")
        log.warning(
            "MLflow run %s of an earlier `interlingua run` on %s was left RUNNING by a killed process; marked KILLED",
            stale.info.run_id,
            run_dir,
        )
