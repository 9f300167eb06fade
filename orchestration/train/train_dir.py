"""The training directory (`<run_dir>/train`): which of its entries are this product's (`TrainKind`,
`check_train_dir`: a user's file there is never written over or removed), and what `--force` removes of them
(`start_over`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from core import ownership
from core.location import Location, Where
from core.output import OutputFolder
from orchestration.adapters import model_dir as model_files
from orchestration.train import folders

STATE_FILE = model_files.TRAIN_STATE

_WORKER_FILES = re.compile(r"workers(/rank-\d+\.json)?")
# The model's staging folders beside it: `checkpoint.export`'s `.model.partial`, `ownership.swap_in`'s
# `.model.old-<pid>`; only these names, holding only a model's files (a user's `.model.bak/` is not ours)
_MODEL_STAGING = re.compile(r"\.model\.(partial|old-\d+)")


class TrainKind:
    """A training directory as an output kind (`core.output.Kind`), kept in place: a killed training resumes
    from it, so it is never staged and swapped; its records are replaced whole (`OutputFolder.write_record`).

    Its own by record: `run.json` (written first, before anything else, by a directory check that passed)
    vouches for the run's `config.yaml` and the exported model's files, which a directory without it never
    holds as the product's. By layout: Ray Train's checkpoints under `ray/` (their folders and files,
    `train.folders`), the workers' `workers/rank-N.json` and the model's staging folders."""

    what = "the training directory"
    marker = STATE_FILE
    advice = "move them out of it or choose another run_dir; interlingua writes and removes only its own files there"

    def ours(self, folder: Location) -> Callable[[str], bool]:
        record = ownership.is_stage_state(folder / STATE_FILE)

        def ours(entry: str) -> bool:
            top, _, rest = entry.partition("/")
            if _MODEL_STAGING.fullmatch(top):
                return not rest or rest in model_files.FILES or rest == ownership.STAGING_MARKER
            if folders.is_ray_entry(entry):
                return True
            if top == "workers":
                return _WORKER_FILES.fullmatch(entry) is not None
            if entry == STATE_FILE:
                return record
            if top == "model":
                return record and (not rest or rest in model_files.FILES)
            return record and entry in (model_files.CONFIG_FILE, ownership.STAGING_MARKER)

        return ours


def folder(train_dir: Where) -> OutputFolder:
    """The training directory at `train_dir` (a local path or a URI) as an output (`core.output.OutputFolder`)."""
    return OutputFolder(train_dir, TrainKind())


def check_train_dir(train_dir: Where) -> list[str]:
    """The entries of a training directory once each is this product's (`TrainKind`), else ForeignDataError
    naming the others (then nothing is written there, and `--force` removes nothing)."""
    return folder(train_dir).check_replaceable()


def start_over(train_dir: Where, found: list[str]) -> None:
    """`--force`: remove the run's own files (`found`, checked by `check_train_dir`) but the exported model,
    which stays until the new training's export replaces it: a retraining killed before then leaves the
    last model in place (locally and in a bucket), never a run directory without one. `run.json`, the
    record that vouches for the model, stays too, until the new training replaces it."""
    kept = ("model", STATE_FILE)
    ownership.remove_ours(train_dir, [e for e in found if e.partition("/")[0] not in kept], keep_root=True)
