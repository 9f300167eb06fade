"""Which model a command uses, decided in one place: `mine.model` and `serve.model` name it the same way.

    chosen = choose_model(config, config.mine.model, scratch, key="mine.model")
    chosen.location        # the model directory: local, a URI, or the champion's download in `scratch`
    chosen.version         # the champion's registered version ("3"); None otherwise

A choice is "run" (the model this config trains, `<run_dir>/train/model`), "champion" (the version of
`registry.model_name` that holds the champion alias, downloaded from the registry), or a model directory
(a path or a URI). The champion decision itself (`lifecycle.champion`) reads the alias as it is, where
"no champion yet" is an answer, not an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from core.errors import UserError
from core.location import Location
from orchestration.adapters import model_dir as model_files
from orchestration.adapters import registry
from orchestration.adapters.tracker import Tracker

if TYPE_CHECKING:
    from orchestration.config import Config


class NoChampion(UserError, LookupError):
    """A choice of "champion" while the registered model has no version holding the alias."""


@dataclass(frozen=True)
class ChosenModel:
    location: str | Path
    version: str | None = None  # the registered version, for a champion


def champion_version(config: Config, *, key: str) -> str:
    """The registered version holding the champion alias; NoChampion naming `key` when none does."""
    tracker = Tracker.of(config)
    found = tracker.champion()
    if found is None:
        raise NoChampion(
            f"{key}=champion: registered model {tracker.model_name!r} in {tracker.uri} has no champion "
            f"yet; promote one (`interlingua run`) or set {key} to a model directory"
        )
    return str(found.version)


def choose_model(
    config: Config, choice: str, scratch: str | Path, *, key: str, version: str | None = None
) -> ChosenModel:
    """The model of `choice` (see the module); a champion (`version` of it, or the one holding the alias) is
    downloaded into `scratch`. NoChampion, or StorageError for a location no store knows, naming `key`."""
    if choice == "run":
        return ChosenModel(model_files.default(config.train_dir))
    if choice == "champion":
        version = version or champion_version(config, key=key)
        tracker = Tracker.of(config)
        folder = registry.download_model_dir(tracker.uri, tracker.model_name, version, scratch)
        return ChosenModel(folder, version)
    return ChosenModel(Location.of(choice, key).text)
