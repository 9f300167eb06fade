"""The base of every config section, the resolved config as YAML, and a file's wrong fields in one line."""

from __future__ import annotations

import re
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError


class Schema(BaseModel):
    """Base for every config section: unknown keys and silent coercions are errors."""

    # no inf/nan: the resolved config is written as JSON and YAML, and must load back the same
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class Record(BaseModel):
    """Base for a manifest the product writes and reads back (an export's, the catalogs'): unknown fields and
    silent coercions are errors, and a record read is never changed."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def wrong_fields(exc: ValidationError, limit: int = 1) -> str:
    """The first `limit` errors of a file read as a model, each as `field.path: message` ("the whole file"
    when the file is not an object at all), joined by "; ": what a damaged file's one-line error names."""
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'the whole file'}: {error['msg']}"
        for error in exc.errors()[:limit]
    )


# YAML 1.2's floats, which PyYAML's YAML 1.1 resolver misses (`3e-4`, `0E0`): a run config reads them as numbers
# (`orchestration.config.yaml_file.YamlLoader`), so a string that looks like one is written quoted (`YamlDumper`)
YAML12_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
YAML12_FLOAT_FIRST = list("-+0123456789.")


class YamlDumper(yaml.SafeDumper):
    """PyYAML's safe dumper, resolving floats as a run config reads them: the string `1e3` is written quoted."""


YamlDumper.add_implicit_resolver("tag:yaml.org,2002:float", YAML12_FLOAT, YAML12_FLOAT_FIRST)


def dump_yaml(config: dict[str, Any]) -> str:
    """A resolved config as YAML: readable, and loadable again as a run config (the same values: `YamlDumper`)."""
    return yaml.dump(config, Dumper=YamlDumper, sort_keys=False, allow_unicode=True)
