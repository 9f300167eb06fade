"""The base of every config section, the resolved config as YAML, and a file's wrong fields in one line."""

from __future__ import annotations

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


def dump_yaml(config: dict[str, Any]) -> str:
    """A resolved config as YAML: readable, and loadable again as a run config."""
    return yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
