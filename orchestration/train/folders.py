"""Ray Train's storage under a training directory: which folder a driver's run writes, where a new folder's run
resumes from, and what is removed.

A run dir that only this host writes (a local one, locked with flock) keeps one folder, `ray/`: a rerun resumes
from its last checkpoint through Ray itself. A run dir in a bucket is held by a lease across hosts, and a holder
that froze past its lease may wake with a checkpoint upload of Ray's in flight, which no check of ours can stop.
So each lease holder's run writes a folder of its own, `ray-<12 hex>/`, named in `run.json` before the run
starts (a fenced write): a taker resumes from the last checkpoint the run committed (the newest that Ray
registered in the folder `run.json` names, else the checkpoint that folder's run resumed from) and writes its own
folder, so a woken holder's late upload lands where nothing reads it. The other folders are removed once the
training is done, and by the next command that trains in the run dir.
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import TypedDict

import pyarrow.fs as pafs

from core import ownership
from core.location import Location, Where
from orchestration.adapters import model_dir as model_files
from orchestration.train.record import SHARED, TrainRecord

log = logging.getLogger(__name__)

_FOLDER = re.compile(r"ray(-[0-9a-f]{12})?")
SNAPSHOT = "checkpoint_manager_snapshot.json"  # Ray Train's record of the checkpoints it registered
# Ray Train's layout in its folder: its storage marker, its snapshot, the checkpoints' folders and the files a
# checkpoint holds (`train.checkpoint`: the model directory's and the resume state)
_CHECKPOINT_FILES = "|".join(re.escape(n) for n in (*model_files.FILES, model_files.CHECKPOINT_STATE))
_RAY_FILES = re.compile(
    rf"{_FOLDER.pattern}(/(\.validate_storage_marker|{re.escape(SNAPSHOT)}|"
    rf"checkpoint_[^/]+(/({_CHECKPOINT_FILES}))?))?"
)


class ReportedMetrics(TypedDict):
    """What a checkpoint was reported with (`train.checkpoint.report`)."""

    step: int
    dev_error: float | None
    finished: bool


class Registered(TypedDict):
    """A checkpoint in Ray Train's snapshot: its folder and its metrics (the keys read here; Ray's has more)."""

    checkpoint_dir_name: str
    metrics: ReportedMetrics


class StorageArgs(TypedDict):
    """RunConfig's name and storage arguments."""

    name: str
    storage_path: str
    storage_filesystem: pafs.FileSystem


def is_ray_entry(entry: str) -> bool:
    """Whether `entry` (a path under the training directory) is a folder or file of Ray Train's layout."""
    return _RAY_FILES.fullmatch(entry) is not None


def new_folder(lease: dict | None) -> str:
    """The folder this driver's run writes: `ray`, or under a lease one of this holder's own."""
    return SHARED if lease is None else f"ray-{uuid.uuid4().hex[:12]}"


def current(state: TrainRecord | None) -> str:
    """The folder the run recorded in `run.json` last wrote (`ray` for a run recorded without one)."""
    return state.ray_dir if state is not None else SHARED


def last_checkpoint(train_dir: Where, state: TrainRecord) -> str | None:
    """The last checkpoint the run committed, as a path under `train_dir`: the newest that Ray registered in the
    folder `run.json` names, else (that run died before its first) the one that folder's run resumed from."""
    folder = current(state)
    try:
        newest = max(_registered(Location.of(train_dir) / folder), key=lambda result: result["metrics"]["step"])
        return f"{folder}/{newest['checkpoint_dir_name']}"
    except (OSError, ValueError, KeyError, TypeError):  # none written, or not Ray's record
        return state.resumed_from


def _registered(ray_dir: Location) -> list[Registered]:
    """The checkpoints Ray registered in `ray_dir`, from its snapshot; OSError, ValueError, KeyError or TypeError
    where there is none or it is not Ray's record."""
    return (ray_dir / SNAPSHOT).read_json()["checkpoint_results"]


def storage_args(train_dir: Where, folder: str) -> StorageArgs:
    """RunConfig's name and storage arguments: `train_dir` as a path in its pyarrow filesystem (a local folder's
    too), so that Ray Train reads and writes through the same filesystem as the rest."""
    filesystem, path = Location.of(train_dir).arrow()
    return {"name": folder, "storage_path": path, "storage_filesystem": filesystem}


def remove_others(train_dir: Where, keep: set[str]) -> None:
    """Remove the Ray folders under `train_dir` other than `keep` (folder names): those of earlier drivers, a
    woken holder's late upload among them. Only folders holding Ray's layout alone; another is kept, warned."""
    train_dir = Location.of(train_dir)
    for name in train_dir.subdirectories():
        if _FOLDER.fullmatch(name) and name not in keep:
            _remove(train_dir, name, what="the folder of an earlier training driver")


def prune_checkpoints(train_dir: Where, folder: str) -> None:
    """Remove the checkpoint folders under `<train_dir>/<folder>` that Ray's record of the run (its snapshot) no
    longer lists: those of an attempt that was killed, which a resumed run does not count against
    `runtime.keep_checkpoints`. The listed ones, the newest included, stay."""
    train_dir = Location.of(train_dir)
    ray_dir = train_dir / folder
    try:
        listed = {result["checkpoint_dir_name"] for result in _registered(ray_dir)}
    except (OSError, ValueError, KeyError, TypeError):
        return  # no record to go by: nothing is removed
    stale = [name for name in ray_dir.subdirectories() if name.startswith("checkpoint_") and name not in listed]
    removed = sum(_remove(train_dir, f"{folder}/{name}", what="a checkpoint of an earlier attempt") for name in stale)
    if removed:
        log.info("removed %d checkpoint(s) of an earlier attempt from %s", removed, ray_dir)


def _remove(train_dir: Location, entry: str, *, what: str) -> bool:
    folder = train_dir / entry
    try:
        found = ownership.check_only_ours(
            folder, lambda e: is_ray_entry(f"{entry}/{e}"), what=what, advice="it is kept"
        )
    except ownership.ForeignDataError as exc:
        log.warning("%s", exc)
        return False
    ownership.remove_ours(folder, found)
    return True
