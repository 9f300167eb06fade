"""Every command that talks to MLflow, against a real tracking server: `mlflow server` on PostgreSQL with
its artifacts in the S3 server's bucket (tests/support), on real Bible text. The run folders are local."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.errors import Exit
from orchestration.adapters import registry, tracking
from orchestration.cli import main
from tests.support.corpus import LANGS, SMALL_BOOKS, VERSIONS, write_corpus
from tests.support.runs import RETUNED, TINY

pytestmark = [pytest.mark.cluster, pytest.mark.beam]
NAME = "served"


def overrides(tmp_path: Path, template: str, uri: str, *more: str) -> list[str]:
    return [
        f"name={NAME}",
        f"run_dir={tmp_path / 'run'}",
        f"tracking.uri={uri}",
        f"prepare.sources=[{{kind: text, path: '{template}', languages: {LANGS}}}]",
        "prepare.split.dev_size=40",
        "prepare.split.test_size=40",
        "prepare.spm.vocab_size=1500",
        *TINY,
        "train.max_steps=10",
        "evaluate.shards=2",
        *more,
    ]


def bucket_keys(s3_server, prefix: str) -> list[str]:
    pages = s3_server.client().get_paginator("list_objects_v2").paginate(Bucket=s3_server.bucket, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def test_run_rerun_train_evaluate_promote_compare_and_serve_through_the_server(
    tmp_path, book_lines, verse, tracking_server, s3_server, tracked_ray, capsys, monkeypatch
):
    """Slow (two runs of the whole pipeline through the server, the second a challenger, then the champion's
    pyfunc loaded back): a run's stage cache, a challenger's comparison and the registry are each only seen
    through the server after runs of its own; one test, the pipeline paid for twice rather than per check."""
    for key in ("AWS_ENDPOINT_URL", "MLFLOW_S3_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key, raising=False)  # the client has no way to the bucket but the server's proxy
    uri = tracking_server.uri
    template = write_corpus(tmp_path / "corpus", book_lines, SMALL_BOOKS)
    first = overrides(tmp_path, template, uri)

    assert main(["run", *first]) == Exit.OK  # prepare, train, evaluate, register v1, the champion alias
    out = capsys.readouterr().out
    assert "promoted served v1" in out and "MLflow pipeline run" in out and uri in out
    assert "--backend-store-uri" not in out  # a server is opened in a browser, not by `mlflow ui`
    assert str(registry.champion(uri, NAME).version) == "1"
    assert main(["run", *first]) == Exit.NOTHING_TO_DO  # the stage cache, its states read through the server
    capsys.readouterr()

    assert main(["train", *first]) == Exit.OK  # the same config: found trained, through the server
    assert "already trained" in capsys.readouterr().out
    assert main(["evaluate", *first, "evaluate.split=dev"]) == Exit.OK
    assert "MLflow run" in capsys.readouterr().out

    # a challenger: the champion is downloaded from the server (its artifacts in the bucket) and re-evaluated
    retuned = overrides(tmp_path, template, uri, *RETUNED)
    code = main(["run", *retuned])
    decision = capsys.readouterr().out
    assert code in (Exit.OK, Exit.NOT_PROMOTED), decision
    champion = "2" if code == Exit.OK else "1"
    assert f"{'promoted' if code == Exit.OK else 'not promoted'} served v2" in decision
    assert str(registry.champion(uri, NAME).version) == champion
    evals = tracking.search_runs(uri, "interlingua", "tags.`interlingua.stage` = 'evaluate'")
    assert {r.info.run_name for r in evals} >= {"served-eval-test", "served-eval-dev", "served-eval-test-champion-v1"}

    assert main(["compare", f"tracking.uri={uri}"]) == Exit.OK
    table = capsys.readouterr().out
    assert table.startswith("experiment 'interlingua': ") and "served-eval-test" in table

    # the pyfunc, loaded back by its alias, embeds as the champion's own model folder does
    import mlflow
    import pandas as pd

    from orchestration.embedding.embedder import SentenceEmbedder

    mlflow.set_tracking_uri(uri)
    model = mlflow.pyfunc.load_model(f"models:/{NAME}@champion")
    sentences = {lang: verse(version, 8, 1, 16) for lang, version in VERSIONS.items()}  # Ruth 1:16
    vectors = model.predict(pd.DataFrame({"sentence": list(sentences.values()), "lang": list(sentences)}))
    folder = registry.download_model_dir(uri, NAME, champion, tmp_path / "champion")
    embedder = SentenceEmbedder.load(folder)
    expected = np.concatenate([embedder.embed([text], lang) for lang, text in sentences.items()])
    np.testing.assert_allclose(vectors, expected, rtol=1e-5, atol=1e-6)

    # the server kept every artifact in the bucket, none beside the database
    keys = bucket_keys(s3_server, "mlflow/")
    assert any(k.endswith("/MLmodel") for k in keys) and any(k.endswith("/model.safetensors") for k in keys), keys[:20]
    assert tracking_server.artifacts == f"s3://{s3_server.bucket}/mlflow"


def test_an_unknown_experiment_on_the_server_is_an_error_naming_what_exists(tracking_server, capsys):
    uri = tracking_server.uri
    tracking.experiment_id(uri, "present")
    assert main(["compare", f"tracking.uri={uri}", "--experiment", "absent"]) == Exit.USER_ERROR
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and f"--experiment 'absent': no such experiment in {uri}" in err, err
    assert "'present'" in err
