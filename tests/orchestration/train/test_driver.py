"""`interlingua train` with Ray Train on real Bible text: export, MLflow, the stage cache, bad configs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from model.model_file import load_model
from orchestration.adapters import tracking
from orchestration.config import load_config
from orchestration.train.driver import TrainError, train
from tests.support.runs import config_for, store_uri


def test_train_checkpoints_exports_and_logs_to_mlflow(small_dataset, tmp_path, trained_run):
    # the shared run (tests/support/fixtures.py): the NMT loss beside the ranking loss, so its per-language
    # perplexities are logged too
    config, result = trained_run.config(), trained_run.result
    assert not result.skipped and result.step == 20
    model, meta = load_model(str(result.model_dir / "model.safetensors"))
    assert meta.dev_error == result.dev_error and 0.0 <= result.dev_error < 1.0
    assert {p.name for p in result.model_dir.iterdir()} >= {
        "model.safetensors",
        "spm.model",
        "config.yaml",
        "progress.json",
    }
    assert load_config(result.model_dir / "config.yaml").model == config.model  # reproducible from it
    lineage = json.loads((result.model_dir / "lineage.json").read_text())  # what it was made from
    manifest = json.loads((Path(config.data_dir) / "manifest.json").read_text())
    assert (
        lineage["spm_sha256"] == manifest["spm"]["sha256"] and lineage["dataset_fingerprint"] == manifest["fingerprint"]
    )
    assert model.embedding_dim == 32

    uri = config.tracking.uri
    run = tracking.get_run(uri, result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["model.encoder"] == "blstm_max" and run.data.params["train.max_steps"] == "20"
    assert run.data.params["model.nmt_weight"] == "1.0"
    for key in (
        "train/loss",
        "train/tokens_per_s",
        "train/cpu_cores",
        "train/ppl/en",
        "dev/xsim_error",
        "dev/xsim_error/fr-en",
    ):
        assert key in run.data.metrics, key
    assert 0 < run.data.metrics["train/cpu_cores"] <= 1.05 * os.cpu_count()
    assert [s for s, _ in tracking.metric_history(uri, result.run_id, "dev/xsim_error")] == [10, 20]
    artifacts = set(tracking.artifacts(uri, result.run_id, "model"))
    assert "model/model.safetensors" in artifacts and "model/spm.model" in artifacts

    again = train(config)  # the same run again: nothing to do
    assert again.skipped and again.run_id == result.run_id
    with pytest.raises(TrainError, match="another dataset or model/train config"):
        train(config_for(small_dataset, tmp_path, "train.max_steps=20", "train.lr=0.01"))


def test_a_failed_training_is_marked_failed(small_dataset, tmp_path, local_ray):
    # M:N with 7 sources cannot be formed from 6 languages: the workers fail
    config = config_for(small_dataset, tmp_path, "train.paths=[{kind: 'M:N', m: 7}]", "runtime.max_failures=0")
    with pytest.raises(Exception, match="no training batch"):
        train(config)
    state = json.loads((Path(config.train_dir) / "run.json").read_text())
    assert tracking.get_run(config.tracking.uri, state["run_id"]).info.status == "FAILED"


def test_a_diverged_training_stops_and_logs_no_nan(small_dataset, tmp_path, local_ray):
    # the NMT loss alone: its softmax overflows (the ranking loss's cosines stay bounded as weights blow up)
    config = config_for(
        small_dataset,
        tmp_path,
        "train.lr=1e36",
        "train.warmup_steps=0",
        "train.schedule=constant",
        "train.max_steps=40",
        "runtime.max_failures=0",
        "model.nmt_weight=1.0",
        "model.ranking_weight=0.0",
    )
    with pytest.raises(Exception, match=r"training diverged: the loss is (nan|inf) before step \d+; lower train.lr"):
        train(config)
    run_id = json.loads((Path(config.train_dir) / "run.json").read_text())["run_id"]
    run = tracking.get_run(config.tracking.uri, run_id)
    assert run.info.status == "FAILED" and "train/loss" not in run.data.metrics
    with pytest.raises(ValueError, match=r"non-finite metrics \{'dev/xsim_error': nan\}"):
        tracking.log_metrics(config.tracking.uri, run_id, {"dev/xsim_error": float("nan"), "ok": 1.0}, 0)


def test_bad_language_in_a_path_is_rejected_before_training(small_dataset, tmp_path):
    config = config_for(small_dataset, tmp_path, "train.paths=[{kind: '1:1', targets: [de]}]")
    with pytest.raises(Exception, match=r"train.paths.0.targets: \['de'\] not among"):
        train(config)


def test_a_weight_of_a_source_the_dataset_lacks_is_rejected_before_training(small_dataset, tmp_path):
    import re

    from orchestration.config import ConfigError

    manifest = json.loads((Path(small_dataset.data_dir) / "manifest.json").read_text())
    sources = sorted(manifest["counts"]["sources"])
    config = config_for(small_dataset, tmp_path, "train.source_weights={catalogs: 2}")
    with pytest.raises(
        ConfigError, match=re.escape(f"train.source_weights: ['catalogs'] not among the dataset's sources {sources}")
    ):
        train(config)
    assert not Path(config.train_dir).exists()


def test_teacher_weights_of_a_source_the_dataset_lacks_or_without_a_teacher_are_rejected_before_training(
    small_dataset, tmp_path
):
    from orchestration.config import ConfigError

    config = config_for(small_dataset, tmp_path, "model.distill_source_weights={catalogs: 2}")
    with pytest.raises(ConfigError, match=r"model.distill_source_weights: \['catalogs'\] not among the dataset's"):
        train(config)
    sources = json.loads((Path(small_dataset.data_dir) / "manifest.json").read_text())["counts"]["sources"]
    config = config_for(small_dataset, tmp_path, f"model.distill_source_weights={{{next(iter(sources))}: 2}}")
    with pytest.raises(ConfigError, match="model.distill_source_weights without model.teacher"):
        train(config)
    assert not Path(config.train_dir).exists()


def test_runtime_settings_do_not_change_the_fingerprint_but_what_is_learned_does(small_dataset, tmp_path):
    from core.dataset import Dataset
    from orchestration.train.builders import _TEACHER_KEYS, train_fingerprint

    manifest = Dataset.open(small_dataset.data_dir)
    base = train_fingerprint(config_for(small_dataset, tmp_path), manifest)
    for runtime in (
        "runtime.num_workers=2",
        "runtime.cpus_per_worker=2",
        "runtime.max_failures=0",
        "runtime.checkpoint_every_steps=7",
        "runtime.log_every_steps=3",
        "runtime.worker_env={}",
    ):
        assert train_fingerprint(config_for(small_dataset, tmp_path, runtime), manifest) == base, runtime
    for learned in ("train.lr=0.5", "train.max_tokens=100", "model.encoder_hidden=8", "train.seed=1"):
        assert train_fingerprint(config_for(small_dataset, tmp_path, learned), manifest) != base, learned
    # a teacher, and its weights: without one the fingerprint is that of a run of before teachers existed
    taught = config_for(small_dataset, tmp_path, "model.teacher=use", "model.distill_weight=1")
    use = {"kind": "use", "version": "1"}
    fingerprints = {train_fingerprint(taught, manifest, {**use, "version": v}) for v in ("1", "2")}
    assert len(fingerprints) == 2 and base not in fingerprints
    # the contrastive objective is learned differently; the default one keeps the fingerprint it had
    contrastive = config_for(
        small_dataset, tmp_path, "model.teacher=use", "model.distill_weight=1", "model.distill_loss=contrastive"
    )
    assert train_fingerprint(contrastive, manifest, use) not in fingerprints
    # so is distilling every language; the default (the sources) keeps it
    every = config_for(
        small_dataset, tmp_path, "model.teacher=use", "model.distill_weight=1", "model.distill_languages=all"
    )
    assert train_fingerprint(every, manifest, use) not in fingerprints
    # so are per-source teacher weights; none (the default) keeps it
    weighted = config_for(
        small_dataset, tmp_path, "model.teacher=use", "model.distill_weight=1", "model.distill_source_weights={a: 2}"
    )
    assert train_fingerprint(weighted, manifest, use) not in fingerprints
    import hashlib
    import json

    before = {
        "data": manifest.fingerprint,
        # nor them: train.decoders_for and train.compatible_with came later
        "train": config_for(small_dataset, tmp_path).train.model_dump(exclude={"decoders_for", "compatible_with"}),
        "model": {
            k: v
            for k, v in config_for(small_dataset, tmp_path).model.model_dump().items()
            if k not in _TEACHER_KEYS  # every key of the teacher: none existed before
        },
    }
    assert base == hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()
    taught_before = {
        "data": manifest.fingerprint,
        "train": taught.train.model_dump(exclude={"decoders_for", "compatible_with"}),
        "teacher": use,
        "model": {
            k: v
            for k, v in taught.model.model_dump().items()
            if k not in ("distill_loss", "distill_languages", "distill_source_weights")
        },
    }
    assert (
        train_fingerprint(taught, manifest, use)
        == hashlib.sha256(json.dumps(taught_before, sort_keys=True).encode()).hexdigest()
    )


@pytest.mark.beam
def test_each_sources_dev_error_is_logged_beside_the_whole_dev_error(tmp_path, local_ray):
    """A dataset of two sources (the short books of the Old Testament and of the New, as two `bible`
    sources): the dev rows are shared between them, and each source's error, its tuples searched among
    themselves, is logged apart. A training of its own: the session's dataset has one source."""
    from pipelines.prepare import run_prepare
    from pipelines.runners import pipeline_options
    from tests.support.corpus import small_config
    from tests.support.runs import TINY

    sources = (
        "prepare.sources=[{kind: bible, name: old, books: [8, 31, 32]}, "
        "{kind: bible, name: new, books: [57, 63, 64, 65]}]"
    )
    config = small_config(
        tmp_path,
        sources,
        f"tracking.uri={store_uri(tmp_path)}",
        *TINY,
        "train.max_steps=10",
        "train.dev_max_sentences=30",
    )
    run_prepare(config.prepare, config.data_dir, options=pipeline_options([]), resolved_config=config.to_dict())
    result = train(config)
    metrics = tracking.get_run(config.tracking.uri, result.run_id).data.metrics
    by_source = {
        key.rsplit("/", 1)[1]: value for key, value in metrics.items() if key.startswith("dev/source_xsim_error/")
    }
    assert set(by_source) == {"old", "new"} and all(0.0 <= e <= 1.0 for e in by_source.values()), metrics
    assert [s for s, _ in tracking.metric_history(config.tracking.uri, result.run_id, "dev/source_xsim_error/new")] == [
        10
    ]


@pytest.mark.parametrize("owned", [False, True])
def test_ray_trains_callbacks_leave_out_the_datasets_manager_and_on_an_owned_instance_the_cleaner(owned, monkeypatch):
    """No DatasetManager actor (the workers read their shards themselves); no placement group cleaner on an
    instance that ends with this process (`cluster.owns_ray`), one on any other (a shared or a remote cluster)."""
    from ray.train import ScalingConfig

    from orchestration.adapters.ray_private import interruptible_trainer

    trainer = interruptible_trainer(owns_ray=owned)(lambda config: None, scaling_config=ScalingConfig(num_workers=1))
    names = [type(c).__name__ for c in trainer._create_default_callbacks()]
    assert "BackendSetupCallback" in names and "DatasetsCallback" not in names, names
    assert ("PlacementGroupCleanerCallback" in names) is not owned, names
