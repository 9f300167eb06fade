"""The state file of a cached stage: what its output was made from, written atomically beside it.

`train` keeps `<run_dir>/train/run.json` (fingerprint, MLflow run, done, best
step); `evaluate` keeps `state.json` in its output folder (fingerprint, MLflow
run). The dataset's manifest plays this part for `prepare`. A stage whose
recorded fingerprint (`core.dataset.fingerprint`) equals the current one
is up to date.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from core import storage


def read_state(path: Path) -> dict[str, Any]:
    """The recorded state, {} when there is none."""
    return json.loads(path.read_text()) if path.is_file() else {}


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Replace the state file whole (a crash leaves the old one or the new one, never half of one)."""
    storage.write_json(path, state)


def check_writable(folder: Path, what: str) -> None:
    """Make `folder` if needed and check that files can be written in it, before any work. ConfigError naming
    `what` (a config key or flag) and the path otherwise."""
    from orchestration.config import ConfigError

    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{what}: {folder} is a file, not a directory; choose another {what}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(f"{what}: cannot write in {folder} ({exc.strerror or exc}); choose another {what} "
                          "or fix its permissions") from None
