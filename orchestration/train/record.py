"""`<run_dir>/train/run.json`, the stage state of `train` (`adapters.state`): what the run was made from, its
MLflow run, the Ray Train folder it writes, and once done where training ended (the exported
`checkpoint.TrainingProgress`, flat beside the rest as it always was)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from pydantic import ConfigDict

from orchestration.adapters.state import StageRecord

if TYPE_CHECKING:
    from orchestration.train.checkpoint import TrainingProgress

SHARED = "ray"  # the one folder of a run dir no other host writes (a run recorded without `ray_dir` wrote it)


class TrainRecord(StageRecord):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    done: bool = False
    ray_dir: str = SHARED
    resumed_from: str | None = None  # the checkpoint (under the training directory) this run started from
    # the exported progress, once done
    step: int | None = None
    elapsed_s: float | None = None
    dev_error: float | None = None
    dev_nll: float | None = None  # decoders trained on frozen encoders (train.decoders_for): what selected the best
    best_step: int | None = None
    bad_evals: int | None = None
    history: list[dict[str, int]] | None = None
    world: int | None = None
    data: dict[str, int] | None = None
    data_digest: str | None = None

    def finished(self, progress: TrainingProgress) -> TrainRecord:
        """This run's record once training ended at `progress` (the last checkpoint's)."""
        return TrainRecord.model_validate({**self.model_dump(), **asdict(progress), "done": True})
