"""The state file of a cached stage: what its output was made from, written atomically beside it.

Each is a model of `StageRecord`, owned by its stage: `train` keeps
`<run_dir>/train/run.json` (`train.record.TrainRecord`: fingerprint, MLflow run,
done, its Ray folder, the progress at the end); `evaluate` keeps `state.json` in
its output folder (`evaluate.job.EvaluationRecord`: fingerprint, MLflow run, the
data searched). The dataset's manifest plays this part for `prepare`. A stage
whose recorded fingerprint (`core.dataset.fingerprint`) equals the current one
is up to date.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TypeVar

import pyarrow.fs as pafs
from pydantic import BaseModel, ConfigDict, ValidationError

from core.errors import UserError
from core.location import Location, json_bytes
from core.schema import wrong_fields

R = TypeVar("R", bound="StageRecord")


class StageRecord(BaseModel):
    """What every stage's record holds: what its output was made from (`fingerprint`) and its MLflow run. Read
    as this base class, any stage's record gives these two (the rest is left to the stage's own model)."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    fingerprint: str
    run_id: str


class StateError(UserError):
    """A stage's record that is not one: damaged, or of another kind."""


def read_state(path: str | Path, record: type[R]) -> R | None:
    """The record at `path` (a local path or a URI) as `record`, None when there is none; StateError naming
    the file and the field when it does not hold one."""
    where = Location.of(path)
    if not where.exists():
        return None
    try:
        return record.model_validate_json(where.read_bytes())
    except ValidationError as exc:
        raise StateError(
            f"{path}: not a {record.__name__} ({wrong_fields(exc, 3)}); interlingua keeps its record of what the "
            "stage's output was made from there: move the file away, or start the stage over with --force"
        ) from None


def state_bytes(state: StageRecord) -> bytes:
    """The state file's bytes: what a stage's commit writes last (`core.output.OutputFolder.commit`), or what a
    training directory's record is replaced with (`OutputFolder.write_record`)."""
    return json_bytes(state.model_dump(mode="json", exclude_none=True))


def check_writable(folder: str | Path, what: str) -> None:
    """Check that files can be written in `folder` (a local path or a URI; made if needed), before any
    work: ConfigError naming `what` (a config key or flag) and the location otherwise."""
    from orchestration.config import ConfigError

    where = Location.of(folder, what)
    fs, path = where.arrow()
    if fs.get_file_info(path).type == pafs.FileType.File:
        raise ConfigError(f"{what}: {folder} is a file, not a directory; choose another {what}")
    probe = where / f".write-check-{uuid.uuid4().hex[:8]}"  # ours: written, then deleted
    try:
        probe.write_bytes(b"")
        probe.delete()
    except OSError as exc:  # pyarrow's errors for a refused PUT or a read-only folder are OSErrors
        raise ConfigError(
            f"{what}: cannot write in {folder} ({getattr(exc, 'strerror', None) or exc}); choose "
            f"another {what}, fix its permissions or the store's credentials"
        ) from None
