"""The state file of a cached stage: what its output was made from, written atomically beside it.

`train` keeps `<run_dir>/train/run.json` (fingerprint, MLflow run, done, best
step); `evaluate` keeps `state.json` in its output folder (fingerprint, MLflow
run). The dataset's manifest plays this part for `prepare`. A stage whose
recorded fingerprint (`pipelines.dataset.fingerprint`) equals the current one
is up to date.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def read_state(path: Path) -> dict[str, Any]:
    """The recorded state, {} when there is none."""
    return json.loads(path.read_text()) if path.is_file() else {}


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Replace the state file whole (a crash leaves the old one or the new one, never half of one)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, path)
