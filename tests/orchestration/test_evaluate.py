"""`interlingua evaluate` on a model trained on real Bible text: Ray sharded search, MLflow matrix."""
from __future__ import annotations

import numpy as np
import pytest

from evaluation.search import search
from orchestration import tracking
from orchestration.evaluate import EvaluateError, evaluate, format_matrix, search_pairs
from orchestration.train import train
from tests.orchestration.test_train import config_for, local_ray  # noqa: F401  (fixture)

LANGS = ["en", "fr", "es", "ru", "ar", "zh"]


def test_ray_sharded_search_equals_single_process(local_ray):  # noqa: F811
    rng = np.random.default_rng(0)
    base = rng.normal(size=(120, 16)).astype(np.float32)
    emb = {"en": base, "fr": base + rng.normal(scale=1.0, size=base.shape).astype(np.float32)}
    for metric in ("cosine", "l2"):
        one = search_pairs(emb, metric=metric, shards=1, k=5)
        many = search_pairs(emb, metric=metric, shards=7, k=5)
        for pair in one:
            np.testing.assert_array_equal(many[pair][1], one[pair][1])
            np.testing.assert_array_equal(many[pair][2], one[pair][2])
        np.testing.assert_array_equal(one[("fr", "en")][1], search(emb["fr"], emb["en"], 5, metric)[1])


@pytest.mark.slow
def test_evaluate_a_trained_model_fills_the_matrix_in_mlflow(small_dataset, tmp_path, local_ray):  # noqa: F811
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
    unsharded = evaluate(config.model_copy(update={"evaluate": config.evaluate.model_copy(update={"shards": 1})}))
    assert unsharded.matrix == result.matrix
    assert "zh" in format_matrix(result)
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
def test_embed_and_search_commands_on_a_trained_model(small_dataset, tmp_path, local_ray, verse, capsys):  # noqa: F811
    from orchestration.cli import main
    from orchestration.embedder import SentenceEmbedder

    config = config_for(small_dataset, tmp_path, "train.max_steps=10")
    train(config)
    overrides = [f"run_dir={tmp_path / 'run'}", f"dataset_dir={small_dataset.data_dir}"]
    ruth = [verse("l", 8, 1, n) for n in (1, 2, 3)]  # Ruth 1:1-3 in French, real text
    (tmp_path / "fr.txt").write_text("\n".join(ruth) + "\n", encoding="utf-8")
    out = tmp_path / "fr.npy"
    assert main(["embed", *overrides, "-l", "fr", "-i", str(tmp_path / "fr.txt"), "-o", str(out)]) == 0
    vectors = np.load(out)
    embedder = SentenceEmbedder.load(config.train_dir / "model")
    assert vectors.shape == (3, embedder.model.embedding_dim)
    np.testing.assert_allclose(vectors, embedder.embed(ruth, "fr"), rtol=1e-5, atol=1e-6)
    # the same sentence as stored in the dataset (normalized, lowercased) embeds the same
    np.testing.assert_allclose(embedder.embed([ruth[0].upper()], "fr"), vectors[:1], rtol=1e-5, atol=1e-6)

    capsys.readouterr()
    assert main(["search", *overrides, "-q", ruth[0], "-l", "fr", "--in", "en,zh", "-k", "3"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "[en]" and printed[4] == "[zh]" and len(printed) == 8
    scores = [float(line.split()[0]) for line in printed[1:4]]
    assert scores == sorted(scores, reverse=True) and all(-1.0 <= s <= 1.0 for s in scores)
    assert main(["search", *overrides, "-q", ruth[0], "-l", "de"]) == 2
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9\n")
    assert main(["embed", *overrides, "-l", "fr", "-i", str(tmp_path / "bad.txt"), "-o", str(out)]) == 2


@pytest.mark.slow
def test_use_baseline_runs_through_the_same_job(small_dataset, tmp_path, local_ray):  # noqa: F811
    config = config_for(small_dataset, tmp_path, "evaluate.encoder=use", "evaluate.shards=2")
    result = evaluate(config)  # no trained model needed
    assert result.out_dir.name == "test-use"
    assert len(result.matrix) == 30
    # a real multilingual encoder on real verses: far better than chance (39/40) on en-fr
    assert result.matrix[("fr", "en")] < 0.5 and result.averages["efs"] < 0.5
    run = tracking.get_run(config.tracking.uri, result.run_id)
    assert run.data.tags["interlingua.encoder"] == "use" and "mlflow.parentRunId" not in run.data.tags
