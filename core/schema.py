"""The base of every config section, and the resolved config as YAML."""
from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict


class Schema(BaseModel):
    """Base for every config section: unknown keys and silent coercions are errors."""

    # no inf/nan: the resolved config is written as JSON and YAML, and must load back the same
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


def dump_yaml(config: dict[str, Any]) -> str:
    """A resolved config as YAML: readable, and loadable again as a run config."""
    return yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
