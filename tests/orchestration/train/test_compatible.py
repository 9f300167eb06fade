"""`train.compatible_with`: a new model trained to keep an old model's space. The old model is the run's teacher,
its vectors of the training split a fixed target in their own space (no map: the sizes must match), and the new
model's lineage names it. Every way it cannot be kept is refused before any work, in one line naming the key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from orchestration.config import ConfigError, load_config
from orchestration.train import teacher as teachers
from tests.support.runs import config_for, untrained_model_dir

LANGS = ["en", "fr", "es", "ru", "ar", "zh"]


def test_a_model_to_stay_compatible_with_is_the_teacher_and_every_misfit_is_refused(small_dataset, tmp_path):
    old = untrained_model_dir(small_dataset, tmp_path / "old")  # 16 hidden, max pooling over a BLSTM: 32-d
    base = [f"train.compatible_with={old}", "model.distill_weight=1.0"]
    config = load_config(None, base)
    spec = teachers.resolve(config)
    assert spec is not None and spec.kind == "model" and spec.dim == 32 and set(spec.languages) == set(LANGS)
    teachers.check(config, spec, LANGS)
    teachers.check_compatible(config, spec, 32)
    assert teachers.resolve(load_config(None, [*base, f"model.teacher={old}"])) == spec  # the same model: fine

    with pytest.raises(ConfigError, match=r"^train.compatible_with: .* makes 32-d vectors, this model would make 16-d"):
        teachers.check_compatible(config, spec, 16)
    refused = [
        ([f"train.compatible_with={old}"], r"^train.compatible_with: .*set model.distill_weight above 0"),
        ([*base, "model.teacher=use"], r"^train.compatible_with .* is the run's teacher: model.teacher \(use\)"),
        (["train.compatible_with=use", "model.distill_weight=1"], r"^train.compatible_with: a model directory"),
        ([f"train.compatible_with={tmp_path / 'none'}", "model.distill_weight=1"], r"^train.compatible_with: "),
        ([*base, f"train.decoders_for={old}"], r"^train.compatible_with with train.decoders_for"),
    ]
    for overrides, message in refused:
        with pytest.raises(ConfigError, match=message) as caught:
            given = load_config(None, overrides)
            teachers.check(given, teachers.resolve(given), LANGS)
        assert "\n" not in str(caught.value)
    ja = teachers.TeacherSpec("model", None, {}, ("ja",), 32)
    with pytest.raises(ConfigError, match=r"^train.compatible_with: .* embeds \['ja'\], none of the trained"):
        teachers.check(config, ja, LANGS)


def test_a_compatible_retrain_distils_the_old_space_and_its_lineage_names_the_old_model(trained_run, tmp_path):
    """Through Ray Train: the old model's vectors of the training split are the target of a contrastive
    distillation in their own 32-d space (no map), logged; the exported model's lineage records the old model
    and its sha256. The old model's size is refused before any work. Mechanics on a tiny model, not quality
    (benchmarks/compatible.py measures that on the demo's model)."""
    from core.location import Location
    from core.ownership import ForeignDataError
    from evaluation.compatibility import cross_errors
    from evaluation.store import StoredEmbeddings
    from model.model_file import load_model
    from orchestration.adapters import model_dir as model_files
    from orchestration.adapters import tracking
    from orchestration.evaluate.compatibility import FOLDER
    from orchestration.evaluate.job import evaluate
    from orchestration.train.driver import train

    data_dir = tmp_path / "data"
    shutil.copytree(trained_run.small_dataset.data_dir, data_dir)
    old = trained_run.result.model_dir
    overrides = [
        f"dataset_dir={data_dir}",
        f"train.compatible_with={old}",
        "model.distill_weight=1.0",
        "model.distill_loss=contrastive",
        "train.max_steps=10",
        "train.seed=7",
    ]
    with pytest.raises(ConfigError, match="makes 32-d vectors, this model would make 16-d"):
        train(config_for(trained_run.small_dataset, tmp_path / "small", *overrides, "model.encoder_hidden=8"))
    config = config_for(trained_run.small_dataset, tmp_path / "new", *overrides)
    result = train(config)

    student, _ = load_model(str(result.model_dir / "model.safetensors"))
    assert student.embedding_dim == 32 and student.distill_map is None  # the old space itself, no map
    lineage = model_files.lineage(result.model_dir)
    assert lineage["compatible_with"] == Location.of(old).identity
    assert lineage["compatible_with_sha256"] == model_files.lineage(old)["model_sha256"]
    uri = tracking.resolve_uri(config.tracking.uri)
    losses = [v for _, v in tracking.metric_history(uri, result.run_id, "train/distill_loss")]
    assert losses and all(np.isfinite(losses)) and losses[0] > 0

    # evaluate: the split embedded by the old model too, the new queries searched among its vectors
    evaluated = evaluate(config)
    out = Path(evaluated.out_dir)
    crossed = json.loads((out / "metrics.json").read_text())["cross_version"]
    assert crossed["old_sha256"] == lineage["compatible_with_sha256"] and crossed["languages"] == LANGS
    assert set(crossed["pairs"]) == {f"{p}-{q}" for p in LANGS for q in LANGS}
    assert all(0 <= v <= 1 for v in crossed["pairs"].values()) and crossed["tuples"] == evaluated_tuples(out)
    assert (out / "embeddings-compatible" / "manifest.json").is_file()
    logged = tracking.get_run(uri, evaluated.run_id).data.metrics
    assert logged["eval/cross_version/avg_error"] == pytest.approx(crossed["avg_error"])
    assert logged["eval/cross_version/en-en"] == pytest.approx(crossed["pairs"]["en-en"])
    # the two stores' rows joined by key, here apart from the product's join: the same errors
    new_store, old_store = StoredEmbeddings.open(out / "embeddings"), StoredEmbeddings.open(out / FOLDER)
    at = {str(k): i for i, k in enumerate(old_store.column("key"))}
    order = [at[str(k)] for k in new_store.column("key")]
    new_vectors = {lang: new_store.rows(lang) for lang in LANGS}
    assert crossed["pairs"] == pytest.approx(
        cross_errors(new_vectors, {lang: old_store.rows(lang)[order] for lang in LANGS})
    )
    # every tuple and language here: evaluate's own error, but for ties its sharded search may break otherwise
    assert crossed["own_error"] == pytest.approx(evaluated.averages["all"], abs=0.02)
    # the old model's embeddings are the evaluation's own: a user's file among them is refused, never removed
    users = out / FOLDER / "notes.txt"
    users.write_text("a user's notes\n")
    with pytest.raises(ForeignDataError, match="notes.txt"):
        evaluate(config, force=True)
    assert users.read_text() == "a user's notes\n"


def evaluated_tuples(out: Path) -> int:
    return json.loads((out / "metrics.json").read_text())["sentences"]


def test_a_version_within_the_margin_of_its_own_error_is_tagged_compatible_with_the_old_one(tmp_path, caplog):
    """The champion gate's tag, on a tracking store of its own: the cross-version error `evaluate` wrote in
    metrics.json, within `registry.compatible_margin` of the version's own error, makes it
    `interlingua.compatible_with: v1` (the old model's registered version, found by its sha256); beyond it, no
    such tag and a warning saying the old vectors need embedding again; without a check, nothing."""
    import logging
    from types import SimpleNamespace

    from mlflow.tracking import MlflowClient

    from orchestration.adapters import registry
    from orchestration.lifecycle import champion
    from tests.support.runs import store_uri

    uri = store_uri(tmp_path)
    client = MlflowClient(tracking_uri=uri)
    client.create_registered_model("demo")
    old_sha = "a" * 64
    client.create_model_version("demo", str(tmp_path), tags={champion.MODEL_TAG: old_sha})  # v1
    config = load_config(None, [])
    results = {}
    for cross in (0.055, 0.071):
        version = client.create_model_version("demo", str(tmp_path)).version
        out = tmp_path / f"eval-{version}"
        out.mkdir()
        crossed = {"old_sha256": old_sha, "avg_error": cross, "same_sentence_error": 0.0}
        (out / "metrics.json").write_text(json.dumps({"averages": {"all": 0.05}, "cross_version": crossed}))
        challenger = SimpleNamespace(out_dir=out, averages={"all": 0.05})
        with caplog.at_level(logging.INFO, logger="orchestration.lifecycle.champion"):
            results[cross] = champion._tag_compatibility(config, uri, "demo", str(version), challenger)
        results[str(version)] = client.get_model_version("demo", str(version)).tags
    assert results[0.055] is True and results["2"][registry.COMPATIBLE_TAG] == "v1"
    assert results["2"][champion.CROSS_TAG] == "0.055000"
    assert results[0.071] is False and registry.COMPATIBLE_TAG not in results["3"]
    assert any(
        r.levelname == "WARNING" and "demo v3" in r.getMessage() and "not compatible" in r.getMessage()
        for r in caplog.records
    )
    out = tmp_path / "plain"
    out.mkdir()
    (out / "metrics.json").write_text(json.dumps({"averages": {"all": 0.05}}))
    plain = SimpleNamespace(out_dir=out, averages={"all": 0.05})
    assert champion._tag_compatibility(config, uri, "demo", "3", plain) is None
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="orchestration.lifecycle.champion"):  # e.g. registry.decide_on
        assert champion._tag_compatibility(config, uri, "demo", "3", plain, {"compatible_with": "/old"}) is None
    assert any("trained compatible with /old" in r.getMessage() for r in caplog.records)
