"""The exported model directory: everything needed to embed raw text, and nothing else.

    <run_dir>/train/model/
        model.pt        `model.nmt.save_model`: constructor arguments, weights, step and dev error
        spm.model       the dataset's sentencepiece model
        config.yaml     the resolved run config (normalization, model, train)
        progress.json   the training progress at export (step, dev error, history)
        lineage.json    what it was made from: the dataset's fingerprint, the sha256 of spm.model and model.pt

`interlingua train` writes it (from a checkpoint), `evaluate`, `search`,
`embed` and the MLflow pyfunc model read it; a registered model carries it.
Readers verify it first (`verify`): model.pt and spm.model against their
recorded sha256, and (`check_tokenizer`) that a dataset whose token ids it
is fed was encoded with the model's own spm.model.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from pipelines.dataset import CONFIG_FILE, SPM_MODEL, file_sha256

log = logging.getLogger(__name__)

MODEL_FILE = "model.pt"
SPM_FILE = SPM_MODEL
PROGRESS_FILE = "progress.json"
LINEAGE_FILE = "lineage.json"
REQUIRED = (MODEL_FILE, SPM_FILE, CONFIG_FILE)


class ModelDirError(RuntimeError):
    """A model directory that is corrupt, or of another tokenizer than the data it would be fed."""


class TokenizerMismatch(ModelDirError):
    """A model fed token ids of another sentencepiece model than its own."""


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


def record_lineage(model_dir: Path, manifest: dict[str, Any]) -> dict[str, str]:
    """Write `lineage.json`: the dataset's fingerprint and the sha256 of spm.model and model.pt."""
    lineage = {"dataset_fingerprint": manifest["fingerprint"], "spm_sha256": file_sha256(model_dir / SPM_FILE),
               "model_sha256": file_sha256(model_dir / MODEL_FILE)}
    (model_dir / LINEAGE_FILE).write_text(json.dumps(lineage, indent=2) + "\n")
    return lineage


def lineage(model_dir: Path) -> dict[str, str]:
    """The recorded lineage ({} for a model directory exported before lineage.json existed)."""
    path = model_dir / LINEAGE_FILE
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelDirError(f"{path}: not readable ({exc}); export the model again (`interlingua train`)") from None


def verify(model_dir: Path) -> dict[str, str]:
    """Check model.pt and spm.model against the sha256 recorded in lineage.json; the lineage, with the
    tokenizer's sha256 taken from the bundled spm.model when none was recorded. ModelDirError naming the
    file that differs."""
    record = dict(lineage(model_dir))
    for name, key in ((MODEL_FILE, "model_sha256"), (SPM_FILE, "spm_sha256")):
        path = model_dir / name
        if not path.is_file():
            continue  # `check` and the loaders name a missing file
        actual = file_sha256(path)
        if key in record and record[key] != actual:
            raise ModelDirError(f"{path}: sha256 {actual[:12]} differs from {record[key][:12]} recorded in "
                                f"{LINEAGE_FILE}: the file is damaged or was replaced; export the model again")
        record.setdefault(key, actual)
    return record


def check_tokenizer(model_dir: Path, manifest: dict[str, Any], data_dir: Path | str) -> None:
    """ModelDirError unless the dataset `manifest` (at `data_dir`) was encoded with the model's own spm.model:
    token ids of another tokenizer give a silently wrong embedding."""
    record = verify(model_dir)
    model_spm, data_spm = record.get("spm_sha256"), manifest["spm"].get("sha256")
    if model_spm is None:
        log.warning("%s: no %s and no %s: cannot check that it was trained with the tokenizer of %s",
                    model_dir, LINEAGE_FILE, SPM_FILE, data_dir)
        return
    if model_spm != data_spm:
        raise TokenizerMismatch(
            f"{model_dir} was trained with tokenizer {model_spm[:12]} ({SPM_FILE}) but {data_dir} is encoded "
            f"with {str(data_spm)[:12]}: its token ids would give wrong embeddings. Use the dataset it was trained "
            "on (dataset_dir=...), or train a model on this one")


def load(model_path: Path, map_location: Any = "cpu"):
    """`model.nmt.load_model` of `model_path`, with ModelDirError naming the file when it cannot be read
    (truncated, not a model)."""
    import pickle

    from model.nmt import load_model

    try:
        return load_model(str(model_path), map_location=map_location)
    except FileNotFoundError:
        raise
    except (OSError, RuntimeError, EOFError, KeyError, TypeError, ValueError, pickle.UnpicklingError) as exc:
        raise ModelDirError(f"{model_path}: not a readable model file ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else ''}); export it again") from None


def load_tokenizer(spm_path: Path):
    """The sentencepiece processor of `spm_path`, with ModelDirError naming the file when it is not one."""
    import sentencepiece as spm

    try:
        return spm.SentencePieceProcessor(model_file=str(spm_path))
    except (OSError, RuntimeError) as exc:
        raise ModelDirError(f"{spm_path}: not a readable sentencepiece model ({str(exc).splitlines()[0]}); "
                            "export the model again") from None


def check_readable(model_dir: Path) -> Path:
    """On the driver, before workers load the model: its files are there (FileNotFoundError naming what is
    missing), model.pt and spm.model are those lineage.json records, and both load (ModelDirError naming the
    file). Otherwise every worker would fail on its own, and the reason would be buried in their tracebacks.
    Returns model.pt's path."""
    check(model_dir)
    verify(model_dir)
    load(model_dir / MODEL_FILE)  # the whole file: a truncated one fails only when read to its end
    load_tokenizer(model_dir / SPM_FILE)
    return model_dir / MODEL_FILE
