"""Config -> the flat arguments of the model and the training loop, checked before any work starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from core.dataset import Dataset, fingerprint
from model.args import ModelArgs
from model.training_paths import TrainingPath
from orchestration.config import Config, ConfigError, evaluated_languages
from orchestration.config.training import TrainConfig


@dataclass(frozen=True)
class WorkerJob:
    """Everything a training worker needs from the driver (`driver.worker_job`): picklable, absolute paths
    (workers run elsewhere); the driver's verbosity and progress board are added when the run starts."""

    config: Config
    model_args: ModelArgs  # `model_args`: the constructor arguments of `MultilingualNMT`
    languages: list[str]  # the trained ones
    dev_languages: list[str]  # those of the dev similarity error
    data_dir: str
    spm_model: str
    train_dir: str
    mlflow_uri: str
    run_id: str
    # the run dir's lease the driver holds (`lease.held_lease`): every commit of a worker is fenced by it
    lease: dict[str, object] | None = None
    # a checkpoint of the run in another folder than this driver's (`train.folders`): where a worker group that
    # has no checkpoint of its own run yet starts from
    resume_from: str | None = None
    teacher: Any = None  # `core.teacher.TeacherInput`: the teacher's embeddings the workers stream, with one
    frozen: Any = None  # `train.frozen.FrozenModel`: the model whose decoders alone are trained (decoders_for)
    verbosity: int | None = None  # `logs.verbosity()` on the driver; None: the default
    progress_board: Any = None  # `live.shown`'s board: rank 0 posts its progress there


def model_args(config: Config, languages: list[str], vocab_size: int) -> ModelArgs:
    """The constructor arguments of `MultilingualNMT` from the config."""
    m = config.model
    cutoffs = m.adaptive_cutoffs or [vocab_size // 16, vocab_size // 4]
    if m.output == "adaptive" and not (0 < cutoffs[0] and cutoffs == sorted(set(cutoffs)) and cutoffs[-1] < vocab_size):
        raise ConfigError(
            f"model.adaptive_cutoffs {cutoffs}: must increase and stay below the vocabulary size {vocab_size}"
        )
    unknown = [lang for lang in m.nmt_targets or [] if lang not in languages]
    if unknown:
        raise ConfigError(f"model.nmt_targets: {unknown} are not trained; the run trains {languages}")
    return ModelArgs(
        languages=languages,
        vocab_size=vocab_size,
        pooling={"blstm_max": "max", "lstm_last": "last", "bow_mean": "mean"}[m.encoder],
        embed_dim=m.embed_dim,
        encoder_hidden=m.encoder_hidden,
        encoder_layers=m.encoder_layers,
        decoder_hidden=m.decoder_hidden,
        decoder_layers=m.decoder_layers,
        dropout=m.dropout,
        shared_encoder=m.shared_encoder,
        shared_decoder=m.shared_decoder,
        output=m.output,
        adaptive_cutoffs=cutoffs if m.output == "adaptive" else [],
        ranking_scale=m.ranking_scale,
        ranking_margin=m.ranking_margin,
        nmt_weight=m.nmt_weight,
        nmt_targets=m.nmt_targets,
        ranking_pairs=m.ranking_pairs,
        distill_loss=m.distill_loss,
    )


def trained_decoders(config: Config, languages: list[str]) -> list[str]:
    """The target languages whose decoder the training teaches (what `translate` may decode into): every target
    of `train.paths` among `languages` (a path without `targets`: all of them) that `model.nmt_targets` decodes,
    none when `model.nmt_weight` is 0 (no decoder runs)."""
    if config.model.nmt_weight == 0:
        return []
    targets: set[str] = set()
    for path in config.train.paths:
        targets.update(languages if path.targets is None else [lang for lang in path.targets if lang in languages])
    decoded = config.model.nmt_targets
    return sorted(targets if decoded is None else targets & set(decoded))


def training_paths(train: TrainConfig) -> list[TrainingPath]:
    """The training paths of `train.paths`."""
    return [
        TrainingPath(
            kind=p.kind,
            weight=p.weight,
            m=p.m,
            sources=tuple(p.sources) if p.sources else None,
            targets=tuple(p.targets) if p.targets else None,
        )
        for p in train.paths
    ]


class ScheduleArgs(TypedDict):
    """The keyword arguments of `model.training.scheduled_lr`."""

    lr: float
    warmup_steps: int
    schedule: str
    min_lr: float
    max_steps: int
    max_minutes: float | None


def schedule_args(train: TrainConfig) -> ScheduleArgs:
    """The keyword arguments of `model.training.scheduled_lr`."""
    return ScheduleArgs(
        lr=train.lr,
        warmup_steps=train.warmup_steps,
        schedule=train.schedule,
        min_lr=train.min_lr,
        max_steps=train.max_steps,
        max_minutes=train.max_minutes,
    )


def trained_languages(config: Config, available: list[str]) -> list[str]:
    """`train.languages` (all of the dataset's when unset), checked with every path's sources and targets."""
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


def dev_languages(config: Config, languages: list[str]) -> list[str]:
    """The languages of the dev error: `evaluate.languages` among the trained ones."""
    try:
        return evaluated_languages(config, languages)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (the trained languages)") from None


def check_losses(config: Config) -> None:
    """Refuse option combinations that leave a batch without a loss."""
    if config.model.nmt_weight == 0 and config.train.monolingual:
        raise ConfigError(
            "train.monolingual with model.nmt_weight=0: an auto-encoding batch has no ranking "
            "pair and so no loss; turn one of them off"
        )


_TEACHER_KEYS = {
    "teacher",
    "distill_weight",
    "distill_pivot",
    "distill_loss",
    "distill_languages",
    "distill_source_weights",
}


def train_fingerprint(
    config: Config, data: Dataset, teacher: dict[str, str] | None = None, frozen: str | None = None
) -> str:
    """What a checkpoint depends on: the dataset's content and what is learned (`model`, `train`), and the
    teacher's identity (`teacher.TeacherSpec.identity`) with one. Without a teacher its keys are left out, as are
    the defaults of `distill_loss`, `distill_languages` and `distill_source_weights` with one, and
    `train.decoders_for` and `train.compatible_with` unset: the fingerprint of a run of before they existed.
    `frozen`: the sha256 of the model whose decoders alone are trained."""
    m = config.model
    exclude = set(_TEACHER_KEYS) if teacher is None else set()
    exclude |= {"distill_loss"} if m.distill_loss == "mse" else set()
    exclude |= {"distill_languages"} if m.distill_languages == "sources" else set()
    exclude |= {"distill_source_weights"} if not m.distill_source_weights else set()
    model = m.model_dump(exclude=exclude)
    return fingerprint(
        {
            "data": data.fingerprint,
            "model": model,
            "train": config.train.model_dump(
                exclude=({"decoders_for"} if frozen is None else set())
                | ({"compatible_with"} if config.train.compatible_with is None else set())
            ),
            **({"teacher": teacher} if teacher is not None else {}),
            **({"frozen": frozen} if frozen is not None else {}),
        }
    )
