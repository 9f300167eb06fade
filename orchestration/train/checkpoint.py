"""What a training checkpoint holds, and how it is written, restored and exported.

A checkpoint directory (one per `runtime.checkpoint_every_steps`, reported to
Ray Train, which keeps `runtime.keep_checkpoints` of them under
`<run_dir>/train/ray`) is a model directory (`orchestration.adapters.model_dir`: the
best model so far, spm.model, config.yaml, progress.json) plus `state.pt`:
the weights, optimizer, scheduler and progress; with the folder's model
file (the best weights so far, not stored twice) everything a restarted
worker group needs to go on from the same step (= data position).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import torch

from core import fencing, stage
from core.dataset import file_sha256
from core.location import Location, Where
from core.output import Staging
from core.schema import dump_yaml
from model.args import ModelArgs
from model.model_file import load_model, save_model
from model.nmt import MultilingualNMT
from model.stream import DataPosition
from orchestration.adapters import model_dir as model_files
from orchestration.adapters.model_dir import CONFIG_FILE, MODEL_FILE, PROGRESS_FILE, SPM_FILE

if TYPE_CHECKING:
    from ray.train import Checkpoint

    from core.dataset import Dataset

STATE_FILE = model_files.CHECKPOINT_STATE


@dataclass
class TrainingProgress:
    """Where training stands; saved in every checkpoint and exported as progress.json."""

    step: int = 0  # optimizer steps taken, also the number of batches each worker consumed
    elapsed_s: float = 0.0  # training time, restarts excluded
    dev_error: float | None = None  # the best dev similarity error so far (of the best model)
    dev_nll: float | None = None  # with frozen encoders (train.decoders_for), the best dev NLL: what is selected by
    best_step: int | None = None
    bad_evals: int = 0  # evaluations since the best one
    history: list[dict[str, int]] = field(default_factory=list)  # every resume: step and world size
    done: bool = False
    world: int = 1
    data: DataPosition = field(default_factory=DataPosition)  # rank 0's next batch (every rank's, world 1)
    data_digest: str = ""  # rank 0's chain of the batches consumed (`model.stream.BatchStream.digest`)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainingProgress:
        """From a saved progress (checkpoints before the data position was saved have none)."""
        data = DataPosition.from_dict(values["data"]) if "data" in values else DataPosition()
        return cls(**{**values, "data": data})


class RankPosition(TypedDict):
    """Where one rank's stream stands in a checkpoint: its `DataPosition` as a dict, and its batches' digest."""

    position: dict[str, int]
    digest: str


@dataclass
class TrainingState:
    """Everything a restarted worker needs (`state.pt`)."""

    model: dict[str, torch.Tensor]  # the weights (`state_dict`)
    optimizer: dict[str, object]  # the optimizer's `state_dict`
    scheduler: dict[str, object] | None  # the learning rate scheduler's, if any
    progress: TrainingProgress
    best_model: dict[str, torch.Tensor]
    positions: dict[int, RankPosition] = field(default_factory=dict)  # every rank's stream


def restore(resume_from: str | None = None) -> TrainingState | None:
    """The state of the checkpoint Ray Train restarts this worker group from, else of `resume_from` (a
    checkpoint folder, a local path or a URI: the run's last, in an earlier driver's folder), if any."""
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None and resume_from is not None:
        filesystem, path = Location.of(resume_from, "resume_from").arrow()
        checkpoint = ray.train.Checkpoint(path, filesystem=filesystem)
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as path:
        # tensors and plain values only: a state.pt planted in the checkpoint folder cannot run code here
        blob = torch.load(Path(path) / STATE_FILE, map_location="cpu", weights_only=True)
        best = blob.get("best_model")  # in state.pt itself in checkpoints written before 2026-11-27
        if best is None:
            best = load_model(str(Path(path) / MODEL_FILE))[0].state_dict()
    return TrainingState(
        blob["model"],
        blob["optimizer"],
        blob["scheduler"],
        TrainingProgress.from_dict(blob["progress"]),
        best,
        blob.get("positions", {}),
    )


def save_state(state: TrainingState, path: Path) -> None:
    """`state.pt`: tensors and plain values only (`restore` reads it with weights_only=True). The best
    weights are left out: they are the checkpoint's model file, which `restore` reads them from."""
    torch.save(
        {
            "model": state.model,
            "optimizer": state.optimizer,
            "scheduler": state.scheduler,
            "progress": asdict(state.progress),
            "positions": state.positions,
        },
        path,
    )


def report(
    rank: int,
    state: TrainingState,
    model_args: ModelArgs,
    *,
    spm_model: str,
    config: Mapping[str, object],
    metrics: dict[str, float],
    decoders: list[str] | None = None,
) -> None:
    """Rank 0 writes a checkpoint directory and reports it; every other rank reports without one. `decoders`:
    the target languages whose decoder the training taught (`builders.trained_decoders`), in the model's file.

    The directory is written in a private temporary folder and handed to Ray only when whole, so a
    failure on the way (a full disk) is an error of this worker, never a partial checkpoint. Ray uploads it
    to the run's storage behind the next steps (one upload at a time, the last one awaited before the
    worker ends), registers it once it is there, and deletes the temporary folder; a failed upload fails the
    worker, as a failed step does.
    """
    import shutil

    import ray.train
    from ray.train import CheckpointUploadMode

    progress = state.progress
    # not "done": Ray Tune reads that key as "this trial has finished" and stops it
    summary = {"step": progress.step, "dev_error": progress.dev_error, "finished": progress.done}
    if rank != 0:
        ray.train.report(summary, checkpoint=None)
        return
    fencing.check()  # a worker of a driver whose lease was taken over registers no checkpoint
    tmp = tempfile.mkdtemp(prefix="interlingua-ckpt-")
    try:
        folder = Path(tmp)
        save_state(state, folder / STATE_FILE)
        best = MultilingualNMT.build(model_args)
        best.load_state_dict(state.best_model)
        # the tokenizer's identity inside the weights' file: a model folder whose spm.model was replaced is
        # refused even without lineage.json (`model_dir.verify`)
        save_model(
            best,
            str(folder / MODEL_FILE),
            step=progress.best_step,
            dev_error=progress.dev_error,
            spm_sha256=file_sha256(spm_model),
            decoders=decoders,
        )
        (folder / SPM_FILE).write_bytes(Location.of(spm_model).read_bytes())  # the dataset's, local or at a URI
        (folder / CONFIG_FILE).write_text(dump_yaml(dict(config)))
        (folder / PROGRESS_FILE).write_text(json.dumps(asdict(progress), indent=2))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    ray.train.report(
        summary, checkpoint=ray.train.Checkpoint.from_directory(tmp), checkpoint_upload_mode=CheckpointUploadMode.ASYNC
    )


def export(
    checkpoint: Checkpoint,
    model_dir: Where,
    data: Dataset | None = None,
    *,
    lineage_extra: dict[str, str] | None = None,
) -> TrainingProgress:
    """Copy the model directory out of a checkpoint (without the training state) to `model_dir` (a local
    path or a URI), whole (`model_files.folder`: staged, then committed with model.safetensors last), with its
    lineage when the dataset `data` is given (and `lineage_extra`: the model it is compatible with); returns its
    progress. ForeignDataError, before anything is
    copied, when `model_dir` holds what a model directory does not; the previous model stays whole on any
    error."""

    def work(staging: Staging) -> stage.Manifest[TrainingProgress]:
        with checkpoint.as_directory() as src:
            shutil.copytree(src, staging.local, ignore=shutil.ignore_patterns(STATE_FILE), dirs_exist_ok=True)
            progress = TrainingProgress.from_dict(json.loads((Path(src) / PROGRESS_FILE).read_text()))
        if data is not None:
            model_files.record_lineage(staging.local, data, lineage_extra)
        return stage.Manifest(progress, None)  # the staging folder holds model.safetensors, committed last

    # a foreign file is refused before the copy, not found after; locally the commit is two renames: the old
    # model is never half-deleted (`core.stage`)
    return stage.run(stage.always(model_files.folder(model_dir)), work).manifest
