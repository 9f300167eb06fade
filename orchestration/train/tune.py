"""`interlingua tune`: a hyperparameter search over any config key, on Ray Tune.

    interlingua tune -c configs/bible6-cpu.yaml --space configs/tune/bible6-cpu.yaml

Every trial is one `interlingua train` run (Ray Train inside the Tune trial)
with the base config plus the trial's sampled keys, in its own run directory
`<run_dir>/tune/trials/<trial id>` on the base config's prepared dataset. Its
dev similarity error reaches Tune at every evaluation (TuneReportCallback), so
an ASHA scheduler stops the weak trials early. Every trial is an MLflow run
nested under one `tune` run; `interlingua compare --stage train` lists them.
The best trial's resolved config is written to `<run_dir>/tune/best.yaml`,
ready for `interlingua run`. Rerunning the same command after a crash resumes
the search from Tune's experiment state. `run_dir` may be a URI (s3://...):
then Tune's experiment state, tune.json, best.yaml and every trial's run
directory live there, through Tune's `storage_filesystem` and `core.location`.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from core import connection, ownership
from core.dataset import Dataset
from core.location import Location
from core.schema import dump_yaml
from orchestration.adapters import tracking
from orchestration.adapters.cluster import check_every_node_reaches, ensure_ray
from orchestration.adapters.tracker import Tracker
from orchestration.config import Config, ConfigError, JSONValue, with_values
from orchestration.train import teacher as teachers
from orchestration.train.search_space import SearchSpace, example, space_origins, tune_domains

log = logging.getLogger(__name__)

METRIC = "dev_error"  # the best dev similarity error so far, as `checkpoint.report` reports it
TUNE_DIR, BEST_FILE, STATE_FILE = "tune", "best.yaml", "tune.json"
BEST_HEADER = "# best of "  # the first line of every best.yaml the search writes
NO_TUNE_SIGINT = "TUNE_DISABLE_SIGINT_HANDLER"  # Ray Tune's switch for its own SIGINT handler (we install ours)


@dataclass
class TuneResult:
    best_config: str  # a local path or a URI, as run_dir is
    best_error: float
    trials: int
    run_id: str


class TrialParams(TypedDict):
    """What a trial receives from Tune: its sampled values of the search space, the base config
    (`Config.to_dict`) and the search's MLflow run."""

    values: dict[str, JSONValue]
    base: dict[str, JSONValue]
    parent_run_id: str


def trial_config(config: Config, values: Mapping[str, JSONValue], trial_id: str) -> Config:
    """The base config with a trial's values, in the trial's own run directory, on the base dataset.
    Checkpoints follow evaluations, so every report carries the dev error the scheduler compares."""
    run_dir = Location.of(config.run_location).join(TUNE_DIR, "trials", trial_id).text
    trial = with_values(
        config, {**values, "name": f"{config.name}-{trial_id}", "run_dir": run_dir, "dataset_dir": config.data_dir}
    )
    return with_values(trial, {"runtime.checkpoint_every_steps": trial.train.eval_every_steps})


def _trial(params: TrialParams, storage_env: dict[str, str]) -> None:
    """One Tune trial: `interlingua train` of the base config plus the sampled values. `storage_env`: the
    driver's object store variables (`connection.environment`), for a trial on a node started without them."""
    import ray.tune
    from ray.tune.integration.ray_train import TuneReportCallback

    from orchestration.train.driver import train

    os.environ.update(storage_env)
    base = Config.model_validate(params["base"])
    trial_id = ray.tune.get_context().get_trial_id()
    config = trial_config(base, params["values"], trial_id)
    train(
        config,
        parent_run_id=params["parent_run_id"],
        callbacks=[TuneReportCallback()],
        tags={tracking.TUNE_TAG: params["parent_run_id"], tracking.TRIAL_TAG: trial_id},
    )


def tune(config: Config, space: SearchSpace, *, space_path: str | Path) -> TuneResult:
    """Run (or resume) the search; write the best trial's config; log the search to MLflow. Ctrl+C stops the
    trials, saves the search for a rerun to resume, marks its MLflow runs KILLED and raises KeyboardInterrupt."""
    tracker = Tracker.of(config)
    uri = tracker.uri
    tracker.check_reachable()
    tune_dir = Location.of(config.run_location) / TUNE_DIR
    check_tune_dir(tune_dir)
    origins = space_origins(space_path)
    if space.scheduler == "asha" and space.asha.grace_steps > config.train.max_steps:
        raise ConfigError(
            f"{space_path}: asha.grace_steps {space.asha.grace_steps} is above train.max_steps "
            f"{config.train.max_steps}: a trial could never be stopped early; lower grace_steps or "
            "raise train.max_steps"
        )
    for key in space.space:  # every key must exist and accept a value from its domain before anything starts
        with_values(config, {key: example(space.space[key])}, origins)
    domains = tune_domains(space)  # Ray's own checks of the domains too, before the MLflow run
    state_path = tune_dir / STATE_FILE
    state = state_path.read_json() if state_path.exists() else {}
    ensure_ray(
        config.runtime.ray_address,
        dashboard=config.runtime.ray_dashboard,
        worker_niceness=config.runtime.worker_niceness,
    )
    check_every_node_reaches(uri, dataset_dir=str(config.data_dir), run_dir=str(tune_dir))  # the trials' nodes
    teacher = teachers.resolve(config)
    if teacher is not None:  # once, here: concurrent trials would each compute the same embeddings
        teachers.embeddings(config, Dataset.open(config.data_dir).verify(["train"]), teacher)
    with tracker.run(
        f"{config.name}-tune",
        {"space": space.model_dump(mode="json"), **config.to_dict()},
        stage="tune",
        resume_run_id=state.get("run_id"),
    ) as run:
        state_path.write_json({"run_id": run.id})
        interrupted = _Interruption()
        try:
            tuner = _tuner(config, space, domains, run.id, tune_dir)
            with _graceful_sigint(interrupted):
                results = tuner.fit()
            if interrupted.is_set():  # Tune returns as from a finished search: the trials were stopped
                raise KeyboardInterrupt
            best = results.get_best_result(metric=METRIC, mode="min", scope="all")
            if best is None or best.metrics.get(METRIC) is None:
                raise RuntimeError(f"no trial reported a dev error; see the trial logs in {tune_dir / 'ray'}")
        finally:  # those the scheduler stopped; on a failure, those whose actors are gone
            _close_running_trials(tracker, run.id, interrupted.at_ms)
        values = best.config["values"]
        path = tune_dir / BEST_FILE
        text = (
            f"{BEST_HEADER}{len(results)} trials of {space_path}: dev error {best.metrics[METRIC]:.4f}\n"
            + dump_yaml(with_values(config, values).to_dict())
        )  # base run_dir
        path.write_bytes(text.encode("utf-8"))
        run.log_metrics({"tune/best_dev_error": best.metrics[METRIC], "tune/trials": len(results)}, step=0)
        run.set_tags({f"tune.best.{k}": str(v) for k, v in values.items()})
        run.log_text(text, BEST_FILE)
    return TuneResult(path.text, float(best.metrics[METRIC]), len(results), run.id)


def check_tune_dir(tune_dir: Location) -> None:
    """ForeignDataError naming what in `tune_dir` (a local path or a URI) the search did not write: best.yaml
    (its own begins with BEST_HEADER) and tune.json (its own holds the run id alone) are rewritten, so a user's
    file of that name is refused too."""

    def ours(entry: str) -> bool:
        if entry == BEST_FILE:
            with (tune_dir / entry).open_input() as best:  # its first line only
                return best.readline().startswith(BEST_HEADER.encode("utf-8"))
        if entry == STATE_FILE:  # the search's own: {"run_id": "..."} and nothing else
            try:
                state = json.loads((tune_dir / entry).read_bytes())
            except (ValueError, UnicodeDecodeError):
                return False
            return isinstance(state, dict) and set(state) == {"run_id"} and isinstance(state["run_id"], str)
        return entry.split("/")[0] in ("ray", "trials")

    ownership.check_only_ours(
        tune_dir, ours, what="tune", advice=f"move them out of {tune_dir}; interlingua writes only its own search there"
    )


def _tuner(config: Config, space: SearchSpace, domains: dict[str, object], run_id: str, tune_dir: Location):
    """A new Ray Tune search of `domains`, or the one saved in `tune_dir` (a local path or a URI) restored."""
    import ray
    from ray import tune as ray_tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    per_trial = config.runtime.num_workers * config.runtime.cpus_per_worker
    concurrent = space.max_concurrent_trials or max(1, int(ray.cluster_resources().get("CPU", 1)) // per_trial)
    # the trial itself only waits on its Ray Train run, whose workers hold the CPUs (Tune needs a
    # non-empty request: a hundredth of a CPU). The store's variables go by Ray's object store, not in
    # param_space: Tune saves that beside every trial, in the bucket too.
    trainable = ray_tune.with_resources(
        ray_tune.with_parameters(_trial, storage_env=connection.environment()), {"CPU": 0.01}
    )
    param_space = {"values": domains, "base": config.to_dict(), "parent_run_id": run_id}
    # Tune's own state goes through the same filesystem as the rest (`Location.arrow`: a store's, its endpoint)
    filesystem, path = tune_dir.arrow()
    experiment = posixpath.join(path, "ray")
    if ray_tune.Tuner.can_restore(experiment, storage_filesystem=filesystem):
        log.info("resuming the search in %s", tune_dir / "ray")
        return ray_tune.Tuner.restore(
            experiment, trainable, param_space=param_space, resume_errored=True, storage_filesystem=filesystem
        )
    scheduler = (
        ASHAScheduler(
            time_attr="step",
            grace_period=space.asha.grace_steps,
            reduction_factor=space.asha.reduction_factor,
            max_t=config.train.max_steps,
        )
        if space.scheduler == "asha"
        else FIFOScheduler()
    )
    return ray_tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=ray_tune.TuneConfig(
            metric=METRIC,
            mode="min",
            num_samples=space.num_samples,
            scheduler=scheduler,
            max_concurrent_trials=concurrent,
        ),
        run_config=ray_tune.RunConfig(name="ray", storage_path=path, storage_filesystem=filesystem, verbose=1),
    )


class _Interruption(threading.Event):
    """Set by Ctrl+C during the search (`_graceful_sigint`); `at_ms`: when, in MLflow's milliseconds."""

    at_ms: int | None = None

    def set(self) -> None:
        self.at_ms = int(time.time() * 1000)
        super().set()


@contextmanager
def _graceful_sigint(interrupted: _Interruption) -> Iterator[threading.Event]:
    """Ctrl+C during `Tuner.fit`: Tune stops the trials and saves the search's state (what a rerun resumes), and
    the event is set for the caller to report the interruption. Tune's own SIGINT handler stops as gracefully but
    then returns as if the search had ended, so ours asks Tune through its SIGUSR1 handler. A second Ctrl+C, or
    one before Tune listens, stops at once."""

    def on_sigint(signum, frame) -> None:
        tune_handler = signal.getsignal(signal.SIGUSR1)
        if interrupted.is_set() or not callable(tune_handler):
            raise KeyboardInterrupt
        interrupted.set()
        log.warning("interrupted: stopping the trials and saving the search for a rerun (Ctrl+C again: at once)")
        tune_handler(signal.SIGUSR1, frame)

    saved = os.environ.get(NO_TUNE_SIGINT)
    os.environ[NO_TUNE_SIGINT] = "1"
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)
        if saved is None:
            os.environ.pop(NO_TUNE_SIGINT, None)
        else:
            os.environ[NO_TUNE_SIGINT] = saved


def _close_running_trials(tracker: Tracker, tune_run_id: str, interrupted_ms: int | None = None) -> None:
    """The search's trial runs still RUNNING (their actors stopped by the scheduler or an interruption, with no
    chance to end their runs): marked KILLED. After an interruption (at `interrupted_ms`), so are those that
    ended FAILED since: a trial stopped while its training's workers were being torn down may see their end as
    an error before its actor goes (a race: most are gone first). A rerun of the search resumes them and sets
    them RUNNING again."""
    running = f"tags.`interlingua.tune` = '{tune_run_id}' and attributes.status = 'RUNNING'"
    for trial in tracker.search_runs(running, 1000):
        tracker.attach(trial.info.run_id).end("KILLED")
    if interrupted_ms is not None:
        stopped = (
            f"tags.`interlingua.tune` = '{tune_run_id}' and attributes.status = 'FAILED' "
            f"and attributes.end_time >= {interrupted_ms}"
        )
        for trial in tracker.search_runs(stopped, 1000):
            tracker.attach(trial.info.run_id).end("KILLED")
