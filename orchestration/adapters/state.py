"""The state file of a cached stage: what its output was made from, written atomically beside it.

`train` keeps `<run_dir>/train/run.json` (fingerprint, MLflow run, done, best
step); `evaluate` keeps `state.json` in its output folder (fingerprint, MLflow
run). The dataset's manifest plays this part for `prepare`. A stage whose
recorded fingerprint (`core.dataset.fingerprint`) equals the current one
is up to date.
"""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from core import fencing, storage


def read_state(path: str | Path) -> dict[str, Any]:
    """The recorded state, {} when there is none (`path`: a local path or a URI)."""
    return storage.read_json(path) if storage.exists(path) else {}


def write_state(path: str | Path, state: dict[str, Any]) -> None:
    """Replace the state file whole (a crash leaves the old one or the new one, never half of one)."""
    fencing.check()
    storage.write_json(path, state)


def check_writable(folder: str | Path, what: str) -> None:
    """Check that files can be written in `folder` (a local path or a URI; made if needed), before any
    work: ConfigError naming `what` (a config key or flag) and the location otherwise."""
    from orchestration.config import ConfigError

    fs, path = storage.resolve(folder)
    if fs.get_file_info(path).type == pafs.FileType.File:
        raise ConfigError(f"{what}: {folder} is a file, not a directory; choose another {what}")
    probe = storage.join(folder, f".write-check-{uuid.uuid4().hex[:8]}")  # ours: written, then deleted
    try:
        storage.write_bytes(probe, b"")
        storage.delete_file(probe)
    except OSError as exc:  # pyarrow's errors for a refused PUT or a read-only folder are OSErrors
        raise ConfigError(f"{what}: cannot write in {folder} ({getattr(exc, 'strerror', None) or exc}); choose "
                          f"another {what}, fix its permissions or the store's credentials") from None
