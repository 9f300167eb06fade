"""Reading a run's YAML: the file with the line of every key (for errors that name where a value was given),
`section.key=value` overrides, and YAML 1.2 floats. `ConfigError` is what every configuration problem raises.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from core.errors import UserError
from core.schema import YAML12_FLOAT, YAML12_FLOAT_FIRST


class ConfigError(UserError, ValueError):
    """A configuration the user must fix; the message says where and what."""


class YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, reading floats as YAML 1.2 does: `3e-4` is a number, not a string."""


YamlLoader.add_implicit_resolver("tag:yaml.org,2002:float", YAML12_FLOAT, YAML12_FLOAT_FIRST)


def load_yaml(text: str):
    """YAML text as Python values (`YamlLoader`)."""
    return yaml.load(text, Loader=YamlLoader)


def read_yaml(path: Path) -> tuple[dict[str, object], dict[tuple[str, ...], int]]:
    """A YAML mapping file and the line of every key path in it (`index_lines`); ConfigError names the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc}") from None
    try:
        node = yaml.compose(text, Loader=YamlLoader)
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    lines: dict[tuple[str, ...], int] = {}
    index_lines(node, (), lines)
    return data, lines


def index_lines(node: yaml.Node, prefix: tuple[str, ...], out: dict[tuple[str, ...], int]) -> None:
    """Map every key path (('prepare', 'spm', 'vocab_size'), list items as '0', '1') to its line."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            path = prefix + (str(key_node.value),)
            out[path] = key_node.start_mark.line + 1
            index_lines(value_node, path, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            path = prefix + (str(i),)
            out[path] = item.start_mark.line + 1
            index_lines(item, path, out)


def apply_override(data: dict[str, object], override: str) -> tuple[str, ...]:
    """Set `section.key=value` in `data`; returns the key path it set."""
    key, sep, raw = override.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {override!r}: write it as section.key=value")
    try:
        value = load_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {override!r}: value is not valid YAML: {exc}") from None
    node = data
    parts = key.split(".")
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"override {override!r}: {'.'.join(parts[: depth + 1])} is not a section")
        node = child
    node[parts[-1]] = value
    return tuple(parts)
