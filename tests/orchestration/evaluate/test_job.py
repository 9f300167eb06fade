"""`interlingua evaluate` on a model trained on real Bible text: Ray sharded search, MLflow matrix."""
from __future__ import annotations

import pytest

from orchestration import tracking
from orchestration.evaluate import EvaluateError
from orchestration.evaluate.job import evaluate
from orchestration.train.driver import train
from tests.orchestration.helpers import config_for

LANGS = ["en", "fr", "es", "ru", "ar", "zh"]


@pytest.mark.slow
def test_evaluate_a_trained_model_fills_the_matrix_in_mlflow(small_dataset, tmp_path, local_ray):
    config = config_for(small_dataset, tmp_path, "train.max_steps=20", "model.ranking_weight=1.0",
                        "evaluate.shards=3")
    trained = train(config)
    result = evaluate(config)
    assert set(result.matrix) == {(p, q) for p in LANGS for q in LANGS if p != q}
    assert all(0.0 <= e <= 1.0 for e in result.matrix.values())
    fr_en = result.pairs["fr-en"]
    assert fr_en["p_at_1"] == pytest.approx(1 - fr_en["error"])
    assert fr_en["p_at_5"] >= fr_en["p_at_1"] and fr_en["mean_rank"] >= 1
    assert set(result.averages) == {"all", "ef", "efs", "efsr", "efsra", "efsraz"}
    assert result.averages["efsraz"] == pytest.approx(result.averages["all"])
    again = evaluate(config)  # the same model, data and evaluate config: the stage cache answers
    assert again.skipped and again.run_id == result.run_id and again.matrix == result.matrix
    unsharded = evaluate(config.model_copy(update={"evaluate": config.evaluate.model_copy(update={"shards": 1})}))
    assert unsharded.matrix == result.matrix and not unsharded.skipped
    assert not evaluate(config, force=True).skipped
    assert "zh" in result.format_matrix()
    # one translation per language: only the languages asked for, the same search per pair
    three = config.evaluate.model_copy(update={"languages": ["en", "fr", "zh"]})
    subset = evaluate(config.model_copy(update={"evaluate": three}))
    assert set(subset.matrix) == {(p, q) for p in ("en", "fr", "zh") for q in ("en", "fr", "zh") if p != q}
    assert all(subset.matrix[pair] == result.matrix[pair] for pair in subset.matrix)
    with pytest.raises(EvaluateError, match=r"\['xx'\] are not among them"):
        evaluate(config.model_copy(update={"evaluate": three.model_copy(update={"languages": ["en", "xx"]})}))

    uri = config.tracking.uri
    run = tracking.get_run(uri, result.run_id)
    assert run.data.tags["mlflow.parentRunId"] == trained.run_id
    assert run.data.metrics["eval/xsim_error/fr-en"] == pytest.approx(result.matrix[("fr", "en")])
    assert "eval/margin_error/fr-en" in run.data.metrics and "eval/xsim_error/avg_efs" in run.data.metrics
    names = {a.path for a in tracking._client(uri).list_artifacts(result.run_id)}
    assert {"error_matrix.png", "error_matrix.csv", "metrics.json"} <= names
    assert (result.out_dir / "embeddings" / "fr.npy").is_file()


@pytest.mark.slow
def test_use_baseline_runs_through_the_same_job(small_dataset, tmp_path, local_ray):
    config = config_for(small_dataset, tmp_path, "evaluate.encoder=use", "evaluate.shards=2")
    result = evaluate(config)  # no trained model needed
    assert result.out_dir.name == "test-use"
    assert len(result.matrix) == 30
    # a real multilingual encoder on real verses: far better than chance (39/40) on en-fr
    assert result.matrix[("fr", "en")] < 0.5 and result.averages["efs"] < 0.5
    run = tracking.get_run(config.tracking.uri, result.run_id)
    assert run.data.tags["interlingua.encoder"] == "use" and "mlflow.parentRunId" not in run.data.tags
