"""The one run configuration: YAML file -> typed schema, with `section.key=value` overrides.

    cfg = load_config("configs/bible6.yaml", ["prepare.spm.vocab_size=8000"])

Sections: `prepare` (pipelines.config), `model` and `train` (what is learned),
`evaluate` (what is measured), `runtime` (how it runs: cluster, workers,
devices, cadence), `tracking` (MLflow), `registry` (champion policy) and `serve` (the HTTP endpoint).
Unknown keys, wrong types and impossible values raise `ConfigError`, whose
message names the key and, for keys read from a file, the file and line.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeAlias, get_args

from pydantic import Field, ValidationError, model_validator

from core.location import Location
from core.schema import Schema
from orchestration.config.stages import (
    EvaluateConfig,
    MineConfig,
    RegistryConfig,
    ServeConfig,
    StorageConfig,
    TrackingConfig,
)
from orchestration.config.training import ModelConfig, RuntimeConfig, TrainConfig
from orchestration.config.yaml_file import ConfigError, apply_override, read_yaml
from pipelines.config import PrepareConfig
from pipelines.source_config import Source

log = logging.getLogger(__name__)

# A value of a JSON document: what `Config.to_dict` gives and a search trial sets (`with_values`)
JSONValue: TypeAlias = "str | int | float | bool | None | list[JSONValue] | dict[str, JSONValue]"

# Keys that moved to another section (old -> new): configs and model directories written before the
# move still load, with a warning that names the new place.
MOVED_KEYS = {
    **{
        f"train.{key}": f"runtime.{key}"
        for key in (
            "num_workers",
            "cpus_per_worker",
            "use_gpu",
            "ray_address",
            "max_failures",
            "worker_env",
            "log_every_steps",
            "checkpoint_every_steps",
            "keep_checkpoints",
        )
    },
    "evaluate.embed_actors": "runtime.embed_actors",
    "evaluate.cpus_per_task": "runtime.cpus_per_task",
    "evaluate.use_gpu": "runtime.use_gpu",
    "tracking.registered_model": "registry.model_name",
    "tracking.min_improvement": "registry.min_improvement",
}


# a source's `kind` values: pydantic puts the one it tried into an error's location
SOURCE_KINDS = frozenset(
    kind for member in get_args(get_args(Source)[0]) for kind in get_args(member.model_fields["kind"].annotation)
)


class Config(Schema):
    name: str = Field(
        default="default",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="The run's name: "
        "its MLflow runs' (`<name>-eval-test`...), and the registered model's unless registry.model_name "
        "is set.",
    )
    run_dir: str = Field(default="runs/default", description="Every stage writes below it: data/, train/, eval/.")
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
    mine: MineConfig = Field(default_factory=MineConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)

    @model_validator(mode="after")
    def _locations(self) -> Config:
        # A URI with a scheme pyarrow cannot open, or `s3:/bucket` (one slash), is refused here: taken as a
        # local path it would write into a folder named `s3:` and report success.
        for key, value in (
            ("run_dir", self.run_dir),
            ("dataset_dir", self.dataset_dir),
            ("mine.output_dir", self.mine.output_dir),
        ):
            if value is not None:
                Location.of(value, key)
        return self

    @model_validator(mode="after")
    def _decision_set(self) -> Config:
        names = [t.name for t in self.evaluate.testsets]
        if self.registry.decide_on is not None and self.registry.decide_on not in names:
            raise ValueError(
                f"registry.decide_on: {self.registry.decide_on!r} is not an evaluate.testsets name "
                f"({', '.join(names) or 'none given'})"
            )
        return self

    # Every location below is a string: a URI (s3://bucket/runs/x/train) or an absolute local path. Build
    # paths under them, read and write them, through `core.location.Location.of(...)`.
    @property
    def run_location(self) -> str:
        return Location.of(self.run_dir).text

    @property
    def data_dir(self) -> str:
        return Location.of(self.dataset_dir).text if self.dataset_dir else self._in_run_dir("data")

    @property
    def train_dir(self) -> str:
        return self._in_run_dir("train")

    @property
    def eval_dir(self) -> str:
        return self._in_run_dir("eval")

    @property
    def mine_dir(self) -> str:
        return Location.of(self.mine.output_dir).text if self.mine.output_dir else self._in_run_dir("mine")

    def _in_run_dir(self, name: str) -> str:
        return Location.of(self.run_dir).join(name).text

    def to_dict(self) -> dict[str, JSONValue]:
        """The resolved config, every default filled in; written beside every output."""
        return json.loads(self.model_dump_json())


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read `path` (YAML; schema defaults only when None), apply `key.path=value` overrides.

    Override values are parsed as YAML scalars/flow values (`3`, `true`, `[en, fr]`).
    Raises ConfigError naming the file, line and key of every problem.
    """
    data: dict[str, object] = {}
    lines: dict[tuple[str, ...], int] = {}
    where = "defaults"
    if path is not None:
        where = str(path)
        data, lines = read_yaml(Path(path))
    given = {}
    for override in overrides:
        given[apply_override(data, override)] = "command line"
    moved = _move_old_keys(data)
    lines = {**lines, **{_new_path(path): line for path, line in lines.items()}}
    given = {_new_path(path): origin for path, origin in given.items()}
    if moved:
        log.warning(
            "%s: keys that moved (the config still loads; update it): %s",
            where,
            ", ".join(f"{old} -> {new}" for old, new in moved),
        )
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, where, lines, given)) from None


def with_values(config: Config, values: Mapping[str, JSONValue], origins: dict[str, str] | None = None) -> Config:
    """`config` with `section.key` set to each value (a search trial's sample); ConfigError names a bad key
    and where it was given: `origins[key]` (e.g. the space file's `path:line`), else "search space"."""
    origins = origins or {}
    data = config.to_dict()
    for key, value in values.items():
        node = data
        *parents, last = key.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                raise ConfigError(f"{key}: {part!r} is not a config section [{origins.get(key, 'search space')}]")
            node = child
        node[last] = value
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        given = {tuple(key.split(".")): origins.get(key, "search space") for key in values}
        raise ConfigError(_describe(exc, "the base config", {}, given)) from None


def _move_old_keys(data: dict[str, object]) -> list[tuple[str, str]]:
    """Move every key of MOVED_KEYS found in `data` to its new place; returns the (old, new) moved.
    A value already set at the new place wins."""
    moved = []
    for old, new in MOVED_KEYS.items():
        section, key = old.split(".")
        old_section = data.get(section)
        if not isinstance(old_section, dict) or key not in old_section:
            continue
        value = old_section.pop(key)
        new_section, new_key = new.split(".")
        target = data.setdefault(new_section, {})
        if isinstance(target, dict):
            target.setdefault(new_key, value)
        moved.append((old, new))
    return moved


def _new_path(path: tuple[str, ...]) -> tuple[str, ...]:
    """A key path under its MOVED_KEYS name, where errors locate it."""
    new = MOVED_KEYS.get(".".join(path[:2]))
    return tuple(new.split(".")) + path[2:] if new else path


def _describe(
    exc: ValidationError, where: str, lines: dict[tuple[str, ...], int], given: dict[tuple[str, ...], str]
) -> str:
    """Each problem as `key: message [origin]`; `given` maps each key path set after the file (a command-line
    override, a search-space key) to where it was set."""
    problems = []
    for err in exc.errors():
        loc = _schema_key(err["loc"])
        key = ".".join(loc) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key (check its spelling and section)"
        elif "input" in err and not isinstance(err["input"], (dict, list)):
            msg += f" (got {err['input']!r})"
        problems.append(f"  {key}: {msg} [{_origin(loc, where, lines, given)}]")
    return "invalid configuration:\n" + "\n".join(problems)


def _origin(
    loc: tuple[str, ...], where: str, lines: dict[tuple[str, ...], int], given: dict[tuple[str, ...], str]
) -> str:
    """Where the value at `loc` came from: what set it or a section above it (the last override wins), else
    the file's line of its deepest located prefix, also naming what set a key below it (a section's check)."""
    above = [origin for path, origin in given.items() if loc[: len(path)] == path]
    if above:
        return above[-1]
    below = list(dict.fromkeys(origin for path, origin in given.items() if path[: len(loc)] == loc))
    if below and loc and loc not in lines:  # a section the command line made (the top level is the file's too)
        return ", ".join(below)
    line = next((lines[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in lines), None)
    return ", ".join([f"{where}:{line}" if line else where, *below])


def _schema_key(loc: tuple[Any, ...]) -> tuple[str, ...]:
    """pydantic's error location as the user's key path: without the discriminator value ('bible', 'mined',
    ...) that it inserts after a source's list index."""
    parts = [str(p) for i, p in enumerate(loc) if not (i and isinstance(loc[i - 1], int) and p in SOURCE_KINDS)]
    return tuple(parts)


def evaluated_languages(config: Config, available: list[str]) -> list[str]:
    """`evaluate.languages` (checked against what the model or dataset has), else all of `available`;
    also the languages of the dev error during training."""
    wanted = config.evaluate.languages
    if wanted is None:
        return available
    missing = [lang for lang in wanted if lang not in available]
    if missing or len(wanted) < 2:
        raise ConfigError(
            f"evaluate.languages {wanted}: needs at least two of {available}"
            + (f"; {missing} are not among them" if missing else "")
        )
    return list(wanted)
