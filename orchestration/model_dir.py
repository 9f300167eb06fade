"""The exported model directory: everything needed to embed raw text, and nothing else.

    <run_dir>/train/model/
        model.pt        `model.nmt.save_model`: constructor arguments, weights, step and dev error
        spm.model       the dataset's sentencepiece model
        config.yaml     the resolved run config (normalization, model, train)
        progress.json   the training progress at export (step, dev error, history)

`interlingua train` writes it (from a checkpoint), `evaluate`, `search`,
`embed` and the MLflow pyfunc model read it; a registered model carries it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipelines.dataset import CONFIG_FILE, SPM_MODEL

MODEL_FILE = "model.pt"
SPM_FILE = SPM_MODEL
PROGRESS_FILE = "progress.json"
REQUIRED = (MODEL_FILE, SPM_FILE, CONFIG_FILE)


def default(train_dir: Path) -> Path:
    """Where `interlingua train` exports the run's model."""
    return train_dir / "model"


def check(model_dir: Path) -> Path:
    """`model_dir` if it holds a model; FileNotFoundError naming what is missing otherwise."""
    missing = [name for name in REQUIRED if not (model_dir / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{model_dir}: not a model directory (missing {', '.join(missing)}); "
            "`interlingua train` writes one to <run_dir>/train/model"
        )
    return model_dir


def progress(model_dir: Path) -> dict[str, Any]:
    """The training progress saved with the model ({} for a directory without one)."""
    path = model_dir / PROGRESS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}
