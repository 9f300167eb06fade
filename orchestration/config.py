"""The one run configuration: YAML file -> typed schema, with `section.key=value` overrides.

    cfg = load_config("configs/bible6.yaml", ["prepare.spm.vocab_size=8000"])

Unknown keys, wrong types and impossible values raise `ConfigError`, whose
message names the key and, for keys read from a file, the file and line.
Later stages add their sections (`train:`, `evaluate:`) beside `prepare:`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError

from pipelines.config import PrepareConfig, Schema


class ConfigError(ValueError):
    """A configuration the user must fix; the message says where and what."""


class Config(Schema):
    name: str = Field(default="default", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    run_dir: str = Field(
        default="runs/default", description="Every stage writes below it: data/, train/, eval/."
    )
    prepare: PrepareConfig = Field(default_factory=PrepareConfig)

    @property
    def data_dir(self) -> Path:
        return Path(self.run_dir) / "data"

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
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, where, lines, overrides)) from None


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

