"""The search space of `interlingua tune` (the file given to `--space`): each config key's domain, Ray Tune's
objects made of them, and the sampler and scheduler options. ConfigError names the file and key of a problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator

from core.schema import Schema
from orchestration.config.yaml_file import ConfigError, load_yaml, read_yaml


class Domain(Schema):
    """One key's search domain: exactly one of the fields."""

    choice: list[Any] | None = Field(default=None, min_length=1)
    grid: list[Any] | None = Field(default=None, min_length=1)
    uniform: list[float] | None = Field(default=None, min_length=2, max_length=2, description="[low, high].")
    loguniform: list[float] | None = Field(
        default=None, min_length=2, max_length=2, description="[low, high], low > 0."
    )
    randint: list[int] | None = Field(default=None, min_length=2, max_length=2, description="[low, high), integers.")

    @field_validator("uniform", "loguniform", "randint")
    @classmethod
    def _bounds(cls, bounds: list[float] | None, info) -> list[float] | None:
        # Ray Tune would refuse these only when the search starts, its MLflow run open
        if bounds is not None and not bounds[0] < bounds[1]:
            raise ValueError(f"{bounds}: low must be below high")
        if bounds is not None and info.field_name == "loguniform" and bounds[0] <= 0:
            raise ValueError(f"{bounds}: both bounds must be above 0 (a log scale)")
        return bounds


class Asha(Schema):
    grace_steps: int = Field(default=200, gt=0, description="Steps every trial runs before it can be stopped.")
    reduction_factor: int = Field(default=2, ge=2)


class SearchSpace(Schema):
    """The file given to `--space`."""

    space: dict[str, Domain] = Field(min_length=1, description="Config key (e.g. train.lr) -> its domain.")
    num_samples: int = Field(default=8, ge=1, description="Samples of the space (each grid point this often).")
    max_concurrent_trials: int | None = Field(
        default=None, ge=1, description="Trials at once; the cluster's CPUs / (workers x cpus_per_worker) when unset."
    )
    scheduler: Literal["asha", "fifo"] = "asha"
    asha: Asha = Field(default_factory=Asha)


def load_space(path: str | Path) -> SearchSpace:
    """The search space file; ConfigError names the file and the key of every problem."""
    try:
        data = load_yaml(Path(path).read_text(encoding="utf-8"))
        space = SearchSpace.model_validate(data)
    except FileNotFoundError:
        raise ConfigError(f"{path}: search space file not found") from None
    except (OSError, UnicodeDecodeError) as exc:  # a directory, no permission, not text
        raise ConfigError(f"{path}: not a readable search space file ({exc}); give a YAML file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: "
            + (
                "unknown key (check its spelling)"
                if e["type"] == "extra_forbidden"
                else e["msg"].removeprefix("Value error, ")
            )
            for e in exc.errors()
        )
        raise ConfigError(f"{path}: invalid search space: {problems}") from None
    for key, domain in space.space.items():
        if sum(v is not None for v in domain.model_dump().values()) != 1:
            raise ConfigError(f"{path}: space.{key}: give exactly one of choice, grid, uniform, loguniform, randint")
    return space


def space_origins(path: str | Path) -> dict[str, str]:
    """Each key of the file's `space` -> `path:line`, for errors that name where a value was given."""
    _, lines = read_yaml(Path(path))
    return {p[1]: f"{path}:{line}" for p, line in lines.items() if len(p) == 2 and p[0] == "space"}


def tune_domains(space: SearchSpace) -> dict[str, object]:
    """Ray Tune's search-space objects, one per config key."""
    from ray import tune

    make = {
        "choice": tune.choice,
        "grid": tune.grid_search,
        "uniform": lambda b: tune.uniform(*b),
        "loguniform": lambda b: tune.loguniform(*b),
        "randint": lambda b: tune.randint(*b),
    }
    out: dict[str, object] = {}
    for key, domain in space.space.items():
        kind, bounds = next((k, v) for k, v in domain.model_dump().items() if v is not None)
        out[key] = make[kind](list(bounds))
    return out


def example(domain: Domain) -> Any:
    """A value of the domain, to validate its key before the search."""
    for values in (domain.choice, domain.grid, domain.uniform, domain.loguniform, domain.randint):
        if values:  # none is empty: each has a minimum length
            return values[0]
    raise ConfigError("a search domain needs one of choice, grid, uniform, loguniform, randint")
