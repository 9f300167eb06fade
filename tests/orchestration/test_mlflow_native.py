"""What MLflow's own UI shows, read back with MLflow's client (issue 60): the experiment's kind, each run's
source, the datasets a run read as its dataset inputs (digest, source, schema, counts), the error matrix as a
table, the pipeline's decision as its description, and the registered model's signature, input example and
logged model."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import orchestration
from core.dataset import Dataset, load_manifest
from orchestration.adapters import lineage, registry, tracking
from orchestration.config import load_config
from orchestration.lifecycle.run import Outcome, description
from tests.support.runs import store_uri

KIND = "mlflow.experimentKind"


@pytest.fixture
def uri(tmp_path) -> str:
    return store_uri(tmp_path)


def client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def only_input(uri: str, run_id: str):
    """The run's one dataset input: (its dataset, its tags as a dict)."""
    (found,) = client(uri).get_run(run_id).inputs.dataset_inputs
    return found.dataset, {tag.key: tag.value for tag in found.tags}


def test_the_experiment_is_a_model_training_one_and_one_of_ours_without_a_kind_becomes_one(uri):
    tracking.start_run(uri, "ours", "train", {})
    assert client(uri).get_experiment_by_name("ours").tags[KIND] == "custom_model_development"
    bare = client(uri).create_experiment("older")  # made before the kind existed
    genai = client(uri).create_experiment("genai", tags={KIND: "genai_development"})
    tracking.start_run(uri, "older", "train", {})
    tracking.start_run(uri, "genai", "train", {})
    assert client(uri).get_experiment(bare).tags[KIND] == "custom_model_development"
    assert client(uri).get_experiment(genai).tags[KIND] == "genai_development"  # a user's choice is kept


def test_a_run_names_its_command_version_and_commit_and_a_child_outside_the_cli_its_parents(uri, monkeypatch):
    root = Path(orchestration.__file__).resolve().parents[1]
    commit = None
    if (root / ".git").exists():
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, check=False, text=True
        ).stdout.strip()
    monkeypatch.setattr("sys.argv", ["/venv/bin/interlingua", "-v", "run", "-c", "x.yaml"])
    parent = tracking.start_run(uri, "exp", "pipeline", {})
    tags = tracking.get_run(uri, parent).data.tags
    assert tags["mlflow.source.name"] == f"interlingua run ({lineage.project_version()})"
    assert tags["mlflow.source.type"] == "LOCAL" and tags["interlingua.version"] == lineage.project_version()
    assert tags.get("mlflow.source.git.commit") == commit
    # a Ray Tune trial's process: the command that started its parent
    monkeypatch.setattr("sys.argv", ["/ray/_private/workers/default_worker.py", "--node-ip-address=x"])
    child = tracking.start_run(uri, "exp", "trial", {}, parent_run_id=parent)
    assert tracking.get_run(uri, child).data.tags["mlflow.source.name"] == tags["mlflow.source.name"]
    alone = tracking.start_run(uri, "exp", "alone", {})
    assert tracking.get_run(uri, alone).data.tags["mlflow.source.name"].startswith("default_worker.py (")
    monkeypatch.setattr("sys.argv", ["/venv/lib/site-packages/pytest/__main__.py"])
    assert lineage.command() == "pytest"


def test_the_prepared_dataset_is_a_dataset_input_with_its_fingerprint_languages_and_counts(uri, small_dataset):
    data = Dataset.open(small_dataset.data_dir)
    read = lineage.prepared_input(data, context="training", splits=("train", "dev"))
    with tracking.run(uri, "exp", "train", {}, stage="train", inputs=[read]) as run_id:
        pass
    dataset, tags = only_input(uri, run_id)
    assert dataset.digest == data.fingerprint[: lineage.DIGEST_CHARS]
    assert tags == {"mlflow.data.context": "training", "interlingua.splits": "train,dev"}
    assert dataset.source_type == "local"
    assert json.loads(dataset.source) == {"uri": str(Path(small_dataset.data_dir).resolve())}
    assert [c["name"] for c in json.loads(dataset.schema)["mlflow_colspec"]] == data.languages
    profile, counts = json.loads(dataset.profile), data.manifest.counts
    assert profile["tuples"] == counts.tuples.out and profile["tuples_read"] == counts.tuples.read
    assert profile["sentences"]["fr"] == counts.sentences["fr"].out
    # a resumed run logs its input again: still one
    with tracking.run(uri, "exp", "train", {}, stage="train", resume_run_id=run_id, inputs=[read]):
        pass
    assert only_input(uri, run_id)[0].digest == dataset.digest


def test_a_test_set_is_the_input_of_its_evaluation(uri, small_dataset, tmp_path):
    from orchestration.evaluate.testsets import load_testset

    (tmp_path / "sets").mkdir()
    for lang, lines in {
        "en": ["In the beginning.", "God is love.", ""],
        "fr": ["Au commencement.", "Dieu est amour.", "Fin."],
    }.items():
        (tmp_path / "sets" / f"mini.{lang}").write_text("\n".join(lines) + "\n")
    files = {lang: str(tmp_path / "sets" / f"mini.{lang}") for lang in ("en", "fr")}
    fingerprint = load_manifest(small_dataset.data_dir).fingerprint
    specs = load_config(
        None,
        [
            "evaluate.testsets="
            + json.dumps(
                [
                    {"name": "mini", "files": files},
                    {
                        "name": "pinned",
                        "dataset": str(small_dataset.data_dir),
                        "split": "test",
                        "fingerprint": fingerprint,
                    },
                ]
            )
        ],
    ).evaluate.testsets
    mini, pinned = load_testset(specs[0], ["en", "fr"]), load_testset(specs[1], ["en", "fr"])

    with tracking.run(
        uri,
        "exp",
        "eval-mini",
        {},
        stage="evaluate",
        inputs=[lineage.evaluated_input(small_dataset.data_dir, "testset-mini", mini)],
    ) as run_id:
        pass
    dataset, tags = only_input(uri, run_id)
    assert (dataset.name, dataset.digest) == ("mini", mini.data[: lineage.DIGEST_CHARS])
    assert json.loads(dataset.source) == {"uri": str(tmp_path / "sets")} and tags["mlflow.data.context"] == "evaluation"
    assert json.loads(dataset.profile) == {
        "tuples": 2,
        "tuples_read": 3,
        "tuples_dropped": {"empty": 1},
        "files": files,
    }

    with tracking.run(
        uri,
        "exp",
        "eval-pinned",
        {},
        stage="evaluate",
        inputs=[lineage.evaluated_input(small_dataset.data_dir, "testset-pinned", pinned)],
    ) as run_id:
        pass
    dataset, tags = only_input(uri, run_id)
    assert (dataset.name, dataset.digest) == ("pinned", fingerprint[: lineage.DIGEST_CHARS])
    assert tags["interlingua.splits"] == "test" and json.loads(dataset.profile)["evaluated_tuples"] == len(pinned.table)
    assert [c["name"] for c in json.loads(dataset.schema)["mlflow_colspec"]] == ["en", "fr"]


def test_the_error_matrix_is_a_table_the_ui_previews(uri, tmp_path):
    import mlflow

    from evaluation.report import write_report

    languages = ["en", "fr", "zh"]
    matrix = {(p, q): 0.01 * (i + 1) for i, (p, q) in enumerate((p, q) for p in languages for q in languages if p != q)}
    write_report(tmp_path, matrix, {}, {"all": 0.035}, languages, 40)
    run_id = tracking.start_run(uri, "exp", "eval", {})
    tracking.log_table(uri, run_id, lineage.error_table(tmp_path / "error_matrix.csv"), lineage.MATRIX_TABLE)
    assert lineage.MATRIX_TABLE in tracking.artifacts(uri, run_id)
    logged = json.loads(tracking.get_run(uri, run_id).data.tags["mlflow.loggedArtifacts"])
    assert {"path": lineage.MATRIX_TABLE, "type": "table"} in logged  # what the UI lists as the run's tables
    mlflow.set_tracking_uri(uri)  # load_table searches the runs of the current tracking store
    table = client(uri).load_table(
        tracking.get_run(uri, run_id).info.experiment_id, lineage.MATRIX_TABLE, run_ids=[run_id]
    )
    assert list(table.columns) == ["query", *languages] and list(table["query"]) == languages
    assert table.loc[0, "fr"] == pytest.approx(1.0) and table.loc[2, "fr"] == pytest.approx(6.0)  # percent
    assert table.loc[1, "fr"] != table.loc[1, "fr"]  # the diagonal: NaN


def test_the_pipeline_run_describes_its_decision(uri):
    outcome = Outcome(
        4,
        "not promoted m v2: challenger v2 12.00% vs champion v1 11.00% (needs 0.50 points better)",
        {"prepare": "skipped", "train": "ran", "evaluate": "ran", "register": "ran"},
        matrix="error %       en     fr\nen             -   12.00",
    )
    text = description(outcome)
    assert text.startswith(f"**{outcome.message}**") and "train ran" in text and "en             -   12.00" in text
    assert "12.00" not in description(Outcome(4, "x", {}, matrix="12.00 " * 2000))  # too long for a tag: left out
    run_id = tracking.start_run(uri, "exp", "pipeline", {})
    tracking.describe(uri, run_id, text)
    assert tracking.get_run(uri, run_id).data.tags["mlflow.note.content"] == text


def test_a_trained_evaluated_and_registered_model_shows_its_lineage(trained_run, tmp_path):
    """The training run's dataset input and logged model, the evaluation's input and table, and the registered
    version's signature and input example, as `interlingua run` leaves them."""
    import mlflow
    from mlflow.models import Model

    from orchestration.adapters import model_dir as model_files
    from orchestration.evaluate.job import evaluate
    from orchestration.lifecycle import packaging

    config, trained = trained_run.config(), trained_run.result
    uri = config.tracking.uri
    data = Dataset.open(config.data_dir)
    dataset, tags = only_input(uri, trained.run_id)
    assert dataset.digest == data.fingerprint[: lineage.DIGEST_CHARS] and tags["mlflow.data.context"] == "training"
    result = evaluate(config)
    dataset, tags = only_input(uri, result.run_id)
    assert dataset.digest == data.fingerprint[: lineage.DIGEST_CHARS] and tags["interlingua.splits"] == "test"
    assert lineage.MATRIX_TABLE in tracking.artifacts(uri, result.run_id)

    dim = model_files.load(trained.model_dir / model_files.MODEL_FILE)[0].embedding_dim
    info = packaging.log_model(uri, trained.run_id, trained.model_dir, dim)
    version = registry.register_model(uri, info.model_uri, "lineage", {})
    mlflow.set_tracking_uri(uri)
    registered = mlflow.models.get_model_info(f"models:/lineage/{version}")
    assert [c.name for c in registered.signature.inputs] == ["sentence", "lang"]
    assert registered.saved_input_example_info["artifact_path"] == "input_example.json"
    local = mlflow.artifacts.download_artifacts(f"models:/lineage/{version}", dst_path=str(tmp_path / "model"))
    example = Model.load(local).load_input_example(local)
    assert list(example.columns) == ["sentence", "lang"] and len(example) >= 1
    run = client(uri).get_run(trained.run_id)
    assert [m.model_id for m in run.outputs.model_outputs] == [info.model_id]
    logged = client(uri).search_logged_models(
        [run.info.experiment_id], filter_string=f"source_run_id = '{trained.run_id}'"
    )
    assert [m.model_id for m in logged] == [info.model_id]
