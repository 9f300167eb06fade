"""`interlingua tune` on real Bible text: a tiny search on Ray Tune, its trials in MLflow and `compare`."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import yaml

from orchestration.adapters import tracking
from orchestration.cli import main
from orchestration.config import ConfigError
from orchestration.lifecycle.compare import compare_runs
from orchestration.train.search_space import load_space
from orchestration.train.tune import trial_config, tune
from tests.support.procs import kill_and_tail, own_output, run_to_end, wait_for
from tests.support.runs import TINY, config_for


def write_space(tmp_path, text: str):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


def test_space_errors_name_the_file_and_key(tmp_path, small_dataset):
    config = config_for(small_dataset, tmp_path)
    with pytest.raises(ConfigError, match=r"space.yaml: space.train.lr: give exactly one"):
        load_space(write_space(tmp_path, "space:\n  train.lr: {uniform: [0.1, 0.2], choice: [1]}\n"))
    with pytest.raises(ConfigError, match=r"(?s)space.yaml: invalid search space:.*num_sample: unknown key"):
        load_space(write_space(tmp_path, "num_sample: 3\nspace:\n  train.lr: {choice: [0.1]}\n"))
    with pytest.raises(ConfigError, match="train.learning_rate"):
        trial_config(config, {"train.learning_rate": 0.1}, "t1")
    trial = trial_config(config, {"train.lr": 0.02, "model.encoder_hidden": 24}, "t1")
    assert trial.train.lr == 0.02 and trial.model.encoder_hidden == 24
    assert trial.runtime.checkpoint_every_steps == trial.train.eval_every_steps  # every report has a dev error
    assert trial.run_dir == str(tmp_path / "run" / "tune" / "trials" / "t1") and trial.data_dir == config.data_dir
    in_bucket = trial_config(config_for(small_dataset, tmp_path, "run_dir=s3://bucket/runs/t"), {}, "t1")
    assert in_bucket.run_dir == "s3://bucket/runs/t/tune/trials/t1"  # a URI join, not a local path


def test_a_bad_key_or_value_of_the_space_names_the_space_file_and_line(tmp_path, small_dataset):
    config = config_for(small_dataset, tmp_path)
    space = write_space(
        tmp_path,
        "num_samples: 2\nspace:\n  train.lr: {choice: [0.1]}\n"
        "  model.encoder_hidden: {choice: [-4]}\n  train.learning_rate: {choice: [1]}\n",
    )
    with pytest.raises(ConfigError) as err:  # before any trial: nothing started
        tune(config, load_space(space), space_path=space)
    assert f"model.encoder_hidden: Input should be greater than 0 (got -4) [{space}:4]" in str(err.value)
    assert "command line" not in str(err.value)
    space.write_text("space:\n  train.learning_rate: {choice: [1]}\n")
    with pytest.raises(ConfigError, match=rf"train\.learning_rate: unknown key .* \[{space}:2\]"):
        tune(config, load_space(space), space_path=space)
    assert not (tmp_path / "run").exists()  # refused before the tune folder or any stage folder was made


def test_a_users_file_in_the_tune_folder_is_never_overwritten(tmp_path, small_dataset):
    from core.ownership import ForeignDataError

    config = config_for(small_dataset, tmp_path)
    space = write_space(tmp_path, "space:\n  train.lr: {choice: [0.1]}\n")
    folder = tmp_path / "run" / "tune"
    folder.mkdir(parents=True)
    (folder / "best.yaml").write_text("# my own notes\n")
    with pytest.raises(ForeignDataError, match="best.yaml"):
        tune(config, load_space(space), space_path=space)
    assert (folder / "best.yaml").read_text() == "# my own notes\n"
    assert sorted(p.name for p in folder.iterdir()) == ["best.yaml"]  # refused before any search
    (folder / "best.yaml").unlink()
    for text in ("not json at all", '{"run_id": "abc", "mine": 1}'):  # a user's tune.json, JSON or not
        (folder / "tune.json").write_text(text)
        with pytest.raises(ForeignDataError, match="tune.json"):
            tune(config, load_space(space), space_path=space)
        assert (folder / "tune.json").read_text() == text


def test_a_grace_period_above_the_step_budget_is_one_line_and_exit_2(tmp_path, small_dataset, capsys):
    config = config_for(small_dataset, tmp_path, "train.max_steps=50")
    space = write_space(tmp_path, "asha: {grace_steps: 100}\nspace:\n  train.lr: {choice: [0.1]}\n")
    assert main(["tune", "--space", str(space), *where_for(config), "train.max_steps=50"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "asha.grace_steps 100 is above train.max_steps 50" in err, err
    assert not (tmp_path / "run" / "tune").exists()


def where_for(config) -> list[str]:
    return [
        f"run_dir={config.run_dir}",
        f"dataset_dir={config.data_dir}",
        f"tracking.uri={config.tracking.uri}",
        "prepare.spm.vocab_size=2000",
        *TINY,
    ]


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "space:\n  train.lr: {loguniform: [0.01, -1]}\n",
            "space.train.lr.loguniform: [0.01, -1.0]: low must be below high",
        ),
        (
            "space:\n  train.lr: {loguniform: [0, 0.01]}\n",
            "space.train.lr.loguniform: [0.0, 0.01]: both bounds must be above 0",
        ),
        (
            "space:\n  model.encoder_hidden: {choice: []}\n",
            "space.model.encoder_hidden.choice: List should have at least 1",
        ),
        ("space:\n  train.lr: {uniform: [0.1, 0.1]}\n", "space.train.lr.uniform: [0.1, 0.1]: low must be below high"),
        (None, "not a readable search space file ([Errno 21] Is a directory"),
    ],
)
def test_a_bad_space_file_is_one_line_and_exit_2_before_the_search(text, expected, small_dataset, tmp_path, capsys):
    config = config_for(small_dataset, tmp_path)
    if text is None:
        space = tmp_path / "space"
        space.mkdir()
    else:
        space = write_space(tmp_path, text)
    assert main(["tune", "--space", str(space), *where_for(config)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"interlingua tune: error: {space}: " + err.split(f"{space}: ", 1)[-1].strip()], err
    assert expected in err
    assert not (tmp_path / "run" / "tune").exists()
    assert tracking.search_runs(tracking.resolve_uri(config.tracking.uri), config.tracking.experiment) == []


@pytest.mark.ray
def test_tune_in_a_bucket_stops_on_ctrl_c_resumes_nests_its_trials_in_mlflow_and_a_rerun_trains_nothing(
    s3_bucket, small_dataset, tmp_path
):
    """A grid of two trials with the run dir in a bucket, three commands (one merged test: each starts its own
    Ray, the costly part):
    1. Ctrl+C once the first trial trains (its first checkpoint is in the bucket, not while Ray is still
       starting its workers, whose own start-up errors would then reach stderr): exit 130, one line, no
       traceback, the search's and the trial's MLflow runs KILLED;
    2. the same command: the search resumes from the bucket into the same MLflow runs and finishes; the trials'
       runs nested under the search's, the best config written for `interlingua run`, everything of the search
       in the bucket and nothing local;
    3. the same command again: the finished search restored from the bucket, no trial trained again.
    Slow (three commands, each with a Ray of its own, and two trials): an interrupt, a resume and a rerun are
    each a command a person runs."""
    from core import storage

    run_dir = f"{s3_bucket}/runs/t"
    extra = ["train.max_steps=20", "model.ranking_weight=1.0", "runtime.cpus_per_worker=1"]
    config = config_for(small_dataset, tmp_path, f"run_dir={run_dir}", *extra)
    space = write_space(
        tmp_path,
        "num_samples: 1\nmax_concurrent_trials: 1\nscheduler: fifo\nspace:\n  train.lr: {grid: [0.0001, 0.01]}\n",
    )
    # run in tmp_path: a URI taken for a local path would show up there as `s3:/...`
    command = [sys.executable, "-m", "orchestration.cli", "tune", "--space", str(space), *where_for(config), *extra]
    uri = tracking.resolve_uri(config.tracking.uri)

    def training() -> bool:
        found = storage.files(f"{run_dir}/tune")
        return any(f.endswith("/train/run.json") for f in found) and any("/train/ray/checkpoint_" in f for f in found)

    def runs(stage: str) -> list:
        return tracking.search_runs(uri, config.tracking.experiment, f"tags.`interlingua.stage` = '{stage}'")

    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path) as proc:
        try:
            try:
                wait_for(training, 300, "a trial's first checkpoint", proc)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{kill_and_tail(proc)}") from None
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=300)
        finally:
            proc.kill()
    assert proc.returncode == 130, err
    assert [line for line in err.splitlines() if line.startswith("interlingua")] == [
        "interlingua tune: interrupted; nothing half-done was published"
    ], err
    assert "Traceback" not in own_output(err), err
    (tune_run,) = runs("tune")
    (killed,) = runs("train")
    assert tune_run.info.status == "KILLED" and killed.info.status == "KILLED", killed.info.status

    finished = run_to_end(command, 600, cwd=tmp_path)
    assert finished.returncode == 0, finished.stderr
    out = finished.stdout
    assert f"best config: {run_dir}/tune/best.yaml  (MLflow tune run {tune_run.info.run_id})" in out  # resumed
    found = storage.files(f"{run_dir}/tune")
    trial_runs = runs("train")
    assert killed.info.run_id in {r.info.run_id for r in trial_runs}  # the interrupted trial resumed into its run
    assert {r.info.status for r in trial_runs} == {"FINISHED"}

    again = run_to_end(command, 600, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"(MLflow tune run {tune_run.info.run_id})" in again.stdout and "2 trials" in again.stdout
    rerun = runs("train")  # the finished search restored from the bucket: no trial trains again
    assert sorted(r.info.run_id for r in rerun) == sorted(r.info.run_id for r in trial_runs)
    assert [f for f in storage.files(f"{run_dir}/tune") if f.startswith("trials/")] == [
        f for f in found if f.startswith("trials/")
    ]

    best = storage.read_bytes(f"{run_dir}/tune/best.yaml").decode("utf-8")
    assert best.startswith("# best of 2 trials of ")
    assert yaml.safe_load(best)["train"]["lr"] in (0.0001, 0.01) and yaml.safe_load(best)["run_dir"] == run_dir
    assert storage.read_json(f"{run_dir}/tune/tune.json") == {"run_id": tune_run.info.run_id}
    assert tracking.artifacts(uri, tune_run.info.run_id) == ["best.yaml"]
    trials = storage.subdirectories(f"{run_dir}/tune/trials")
    assert len(trials) == 2 and len(trial_runs) == 2
    for trial in trials:  # each trial's training, states and checkpoints in the bucket
        assert {
            f"trials/{trial}/train/run.json",
            f"trials/{trial}/train/config.yaml",
            f"trials/{trial}/train/model/model.safetensors",
        } <= set(found)
        assert any(f.startswith(f"trials/{trial}/train/ray/checkpoint_") for f in found)
    assert any(f.startswith("ray/") for f in found)  # Tune's experiment state, what a rerun restores
    # nothing local but the space, the SQLite tracking store and its artifacts: no `s3:` folder, no run dir
    assert {p.name for p in tmp_path.iterdir()} <= {"space.yaml", "mlflow.db", "mlartifacts"}

    parent = tracking.get_run(uri, tune_run.info.run_id)
    best_error = parent.data.metrics["tune/best_dev_error"]
    assert parent.info.status == "FINISHED" and 0.0 <= best_error < 1.0
    assert {t.data.tags["mlflow.parentRunId"] for t in trial_runs} == {tune_run.info.run_id}
    assert sorted(t.data.params["train.lr"] for t in trial_runs) == ["0.0001", "0.01"]
    assert min(t.data.metrics["dev/best_xsim_error"] for t in trial_runs) == pytest.approx(best_error)
    assert [int(t.data.params["runtime.checkpoint_every_steps"]) for t in trial_runs] == [10, 10]
    table = compare_runs(config, stage="train")
    assert "2 training runs" in table and "train.lr" in table
