"""`interlingua train`: the driver that launches Ray Train on the prepared dataset.

    result = train(load_config("configs/bible6-cpu.yaml"))

One `TorchTrainer` runs `recipe.train_loop_per_worker` on `train.num_workers`
workers (DDP over gloo on CPU, NCCL on GPU), on the Ray cluster at
`train.ray_address` or a local one. Checkpoints go to `<run_dir>/train/ray`;
running the same config again resumes from the last one (Ray restores the
run from its storage), and a finished run is not trained again. The MLflow
run is created here, handed to rank 0 for metrics, given the artifacts at the
end, and marked FAILED if training fails. The best model (by dev similarity
error) is exported to `<run_dir>/train/model/`.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestration import tracking
from orchestration.config import Config, ConfigError
from pipelines.config import dump_yaml
from pipelines.dataset import SPM_MODEL, load_manifest, split_files

log = logging.getLogger(__name__)

STATE = "run.json"
MODEL_DIR = "model"
MODEL_FILE = "model.pt"


class TrainError(RuntimeError):
    """A training run that cannot start as asked; the message says what to change."""


@dataclass
class TrainResult:
    model_dir: Path
    run_id: str
    step: int
    dev_error: float | None
    skipped: bool


def model_args(config: Config, languages: list[str], vocab_size: int) -> dict[str, Any]:
    """The flat constructor arguments of `MultilingualNMT` from the config."""
    m = config.model
    cutoffs = m.adaptive_cutoffs or [vocab_size // 16, vocab_size // 4]
    if m.output == "adaptive" and not (0 < cutoffs[0] and cutoffs == sorted(set(cutoffs)) and cutoffs[-1] < vocab_size):
        raise ConfigError(
            f"model.adaptive_cutoffs {cutoffs}: must increase and stay below the vocabulary size {vocab_size}"
        )
    return dict(
        languages=languages, vocab_size=vocab_size,
        pooling={"blstm_max": "max", "lstm_last": "last", "bow_mean": "mean"}[m.encoder],
        embed_dim=m.embed_dim, encoder_hidden=m.encoder_hidden, encoder_layers=m.encoder_layers,
        decoder_hidden=m.decoder_hidden, decoder_layers=m.decoder_layers, dropout=m.dropout,
        shared_encoder=m.shared_encoder, shared_decoder=m.shared_decoder, output=m.output,
        adaptive_cutoffs=cutoffs if m.output == "adaptive" else [],
        ranking_scale=m.ranking_scale, ranking_margin=m.ranking_margin, nmt_weight=m.nmt_weight,
        ranking_pairs=m.ranking_pairs,
    )


def _languages(config: Config, manifest: dict[str, Any]) -> list[str]:
    available = list(manifest["languages"])
    languages = config.train.languages or available
    missing = [lang for lang in languages if lang not in available]
    if missing:
        raise ConfigError(f"train.languages: {missing} not in the dataset, which has {available}")
    for i, path in enumerate(config.train.paths):
        for field in ("sources", "targets"):
            bad = [lang for lang in getattr(path, field) or [] if lang not in languages]
            if bad:
                raise ConfigError(f"train.paths.{i}.{field}: {bad} not among the trained languages {languages}")
    return languages


def _dev_languages(config: Config, languages: list[str]) -> list[str]:
    from orchestration.evaluate import EvaluateError, evaluated_languages

    try:
        return evaluated_languages(config, languages)
    except EvaluateError as exc:
        raise ConfigError(f"{exc} (the trained languages)") from None


def _check_losses(config: Config) -> None:
    if config.model.nmt_weight == 0 and config.train.monolingual:
        raise ConfigError("train.monolingual with model.nmt_weight=0: an auto-encoding batch has no ranking "
                          "pair and so no loss; turn one of them off")


def fingerprint(config: Config, manifest: dict[str, Any]) -> str:
    """What a checkpoint depends on: the dataset's content and the model and training config."""
    train = config.train.model_dump(
        exclude={"max_steps", "max_minutes", "num_workers", "ray_address", "max_failures", "cpus_per_worker",
                 "use_gpu", "log_every_steps", "keep_checkpoints", "early_stop_patience_evals",
                 "checkpoint_every_steps", "worker_env"}
    )
    payload = {"data": manifest["fingerprint"], "model": config.model.model_dump(), "train": train}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def loop_config(config: Config, manifest: dict[str, Any], run_id: str, uri: str) -> dict[str, Any]:
    """Everything a worker needs, as plain values (absolute paths: workers run elsewhere)."""
    languages = _languages(config, manifest)
    _check_losses(config)
    data_dir = config.data_dir.resolve()
    return {
        "model_args": model_args(config, languages, manifest["spm"]["vocab_size"]),
        "train": config.train.model_dump(),
        "languages": languages,
        "dev_languages": _dev_languages(config, languages),
        "train_files": [str(p) for p in split_files(data_dir, "train")],
        "dev_files": [str(p) for p in split_files(data_dir, "dev")],
        "spm_model": str(data_dir / SPM_MODEL),
        "train_dir": str(config.train_dir.resolve()),
        "config": config.to_dict(),
        "mlflow": {"uri": uri, "run_id": run_id},
    }


def train(config: Config, *, force: bool = False, restart_stale: bool = False,
          parent_run_id: str | None = None, callbacks: list | None = None,
          tags: dict[str, str] | None = None) -> TrainResult:
    """Train, resume, or skip a finished run. `restart_stale` starts over (instead of refusing) when
    the run dir holds checkpoints of another dataset or config: what a scheduled run wants after new data."""
    manifest = load_manifest(config.data_dir)
    train_dir = config.train_dir.resolve()
    fp = fingerprint(config, manifest)
    state_path = train_dir / STATE
    state = json.loads(state_path.read_text()) if state_path.is_file() else {}
    if state and state.get("fingerprint") != fp and restart_stale:
        log.info("%s was trained on another dataset or config; training again", train_dir)
        force = True
    if state and state.get("fingerprint") != fp and not force:
        raise TrainError(
            f"{train_dir} holds a run of another dataset or model/train config; resuming it would mix "
            "them. Use --force to start over, or another run_dir."
        )
    if force and train_dir.exists():
        shutil.rmtree(train_dir)
        state = {}
    uri = tracking.resolve_uri(config.tracking.uri)
    model_dir = train_dir / MODEL_DIR
    if state.get("done") and (model_dir / MODEL_FILE).is_file():
        log.info("%s is trained already (step %s); nothing to do", model_dir, state.get("step"))
        return TrainResult(model_dir, state["run_id"], state["step"], state.get("dev_error"), skipped=True)

    train_dir.mkdir(parents=True, exist_ok=True)
    cfg = loop_config(config, manifest, "", uri)  # validates before anything starts
    run_id = tracking.start_run(
        uri, config.tracking.experiment, config.name, config.to_dict(),
        resume_run_id=state.get("run_id"), parent_run_id=parent_run_id, tags={"interlingua.stage": "train", **(tags or {})},
    )
    cfg["mlflow"]["run_id"] = run_id
    _write_state(state_path, {"fingerprint": fp, "run_id": run_id, "done": False})
    (train_dir / "config.yaml").write_text(dump_yaml(config.to_dict()))
    try:
        checkpoint = _fit(config, cfg, train_dir, callbacks or [])
        meta = _export(checkpoint, model_dir)
        tracking.log_artifacts(uri, run_id, model_dir, "model")
        if meta.get("dev_error") is not None:  # one value per run, what `compare --stage train` sorts by
            tracking.log_metrics(uri, run_id, {"dev/best_xsim_error": meta["dev_error"]}, meta["step"])
    except BaseException as exc:
        status = "KILLED" if isinstance(exc, (KeyboardInterrupt, SystemExit)) else "FAILED"
        tracking.end_run(uri, run_id, status)
        raise
    tracking.end_run(uri, run_id, "FINISHED")
    _write_state(state_path, {"fingerprint": fp, "run_id": run_id, "done": True, **meta})
    return TrainResult(model_dir, run_id, meta["step"], meta.get("dev_error"), skipped=False)


def ensure_ray(address: str | None, *, log_to_driver: bool = True) -> None:
    """Connect to the Ray cluster at `address`, else the one `ray job submit` exports, else start a local one."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address or os.environ.get("RAY_ADDRESS") or "local", log_to_driver=log_to_driver)


def _fit(config: Config, cfg: dict[str, Any], train_dir: Path, callbacks: list):
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from orchestration.recipe import train_loop_per_worker

    t = config.train
    ensure_ray(t.ray_address)
    resources = {"CPU": t.cpus_per_worker, **({"GPU": 1} if t.use_gpu else {})}
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config=cfg,
        scaling_config=ScalingConfig(num_workers=t.num_workers, use_gpu=t.use_gpu, resources_per_worker=resources),
        run_config=RunConfig(
            name="ray",
            storage_path=str(train_dir),
            failure_config=FailureConfig(max_failures=t.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=t.keep_checkpoints),
            worker_runtime_env={"env_vars": dict(t.worker_env)},
            callbacks=callbacks,
        ),
    )
    result = trainer.fit()
    if result.checkpoint is None:
        raise TrainError(f"training ended without a checkpoint in {train_dir / 'ray'}")
    return result.checkpoint


def _export(checkpoint, model_dir: Path) -> dict[str, Any]:
    """Copy the best model, its config and sentencepiece model out of the checkpoint, atomically."""
    staging = model_dir.with_name(f".{model_dir.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    with checkpoint.as_directory() as src:
        shutil.copytree(src, staging, ignore=shutil.ignore_patterns("state.pt"))
        meta = json.loads((Path(src) / "progress.json").read_text())
    previous = model_dir.with_name(f".{model_dir.name}.previous")
    shutil.rmtree(previous, ignore_errors=True)
    if model_dir.exists():
        os.replace(model_dir, previous)  # two renames: the old model is never half-deleted
    os.replace(staging, model_dir)
    shutil.rmtree(previous, ignore_errors=True)
    return meta


def _write_state(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, path)
