"""The exported model directory: everything needed to embed raw text, and nothing else.

    <run_dir>/train/model/
        model.safetensors  `model.model_file.save_model`: the weights; constructor arguments, step and dev error as
                        JSON in its header (nothing in the directory is code: reading it runs none)
        spm.model       the dataset's sentencepiece model
        config.yaml     the resolved run config (normalization, model, train)
        progress.json   the training progress at export (step, dev error, history)
        lineage.json    what it was made from: the dataset's fingerprint, the sha256 of spm.model and
                        model.safetensors
    (model.safetensors also records the sha256 of the spm.model it was trained with, since lineage.json is
    optional). A directory of an older version holds model.pt (a torch pickle) instead: readers refuse it,
    naming `interlingua upgrade-model` (`embedding.export.upgrade_model_dir`), which converts it once.

`interlingua train` writes it (from a checkpoint, through the output layer: `folder`), `evaluate`, `search`,
`embed` and the MLflow pyfunc model read it; a registered model carries it.
Readers verify it first (`verify`): model.safetensors and spm.model against their
recorded sha256, and (`check_tokenizer`) that a dataset whose token ids it
is fed was encoded with the model's own spm.model. Its files are loaded by
`orchestration.adapters.model_reading` (`load`, `meta`, `load_tokenizer`, and the errors, all available here).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from core import boundary
from core.dataset import CONFIG_FILE, SPM_MODEL, Dataset, file_sha256
from core.location import Location, Where
from core.output import OutputFolder
from orchestration.adapters.model_reading import (
    ModelDirError,
    ModelMissing,
    TokenizerMismatch,
    load,
    load_tokenizer,
    meta,
)

if TYPE_CHECKING:
    from core.normalize import NormalizeConfig

log = logging.getLogger(__name__)

_Location = TypeVar("_Location", bound=str | Path)  # what `check` is given, a str or a Path, it returns

MODEL_FILE = "model.safetensors"
LEGACY_MODEL_FILE = "model.pt"  # the older versions' torch pickle: converted by `upgrade-model`, never loaded as such
SPM_FILE = SPM_MODEL
PROGRESS_FILE = "progress.json"
LINEAGE_FILE = "lineage.json"
REQUIRED = (MODEL_FILE, SPM_FILE, CONFIG_FILE)
FILES = (*REQUIRED, PROGRESS_FILE, LINEAGE_FILE, LEGACY_MODEL_FILE)  # all a model directory holds
CHECKPOINT_STATE = "state.pt"  # in a training checkpoint: what a resume needs beside the model
TRAIN_STATE = "run.json"  # beside the model, in the train directory: the training's fingerprint, run and step


def default(train_dir: Where) -> str | Path:
    """Where `interlingua train` exports the run's model: `<train_dir>/model` (a Path on this host, a URI in a
    store)."""
    where = Location.of(train_dir, "train_dir").join("model")
    return where.local_path or str(where)


def fetch(location: Where) -> Path:
    """A local model directory holding the model at `location`: itself when local; in a store, a copy in this
    user's cache folder (`transfer.cache_dir("models")/<model.safetensors sha256>`), downloaded once per host,
    user and model (torch and sentencepiece read local files) and verified on every use against the sha256
    the source records (`Location.cached_copy`). ModelMissing naming the location when it holds none."""
    where = Location.of(location, "the model directory")

    @functools.cache
    def key() -> str:
        check(str(where))
        # the model's sha256 as lineage.json records it (one small read; hashing the model in the store reads
        # it whole once more), else hashed there (a model exported before lineage.json existed)
        try:
            recorded = where.join(LINEAGE_FILE).read_json().get("model_sha256")
        except (OSError, ValueError, AttributeError):
            recorded = None
        return str(recorded or where.join(MODEL_FILE).sha256())

    def check_copy(copy: Path) -> None:
        # on every use: the files against the copy's lineage.json, and its model against the source's sha256
        actual = verify(copy).get("model_sha256")
        if actual != key():
            raise ModelDirError(
                f"{copy / MODEL_FILE}: sha256 {str(actual)[:12]} is not {key()[:12]}, the model {where} records"
            )

    return where.cached_copy("models", key, check_copy)


class ModelKind:
    """A model directory as an output kind (`core.output.Kind`): the files a model directory holds (`FILES`),
    model.safetensors written last; anything else in it is a user's."""

    what = "the model directory"
    marker = MODEL_FILE
    advice = "move those files out of it; interlingua replaces only its model's files"

    def ours(self, folder: Location) -> Callable[[str], bool]:
        return lambda entry: entry in FILES


def folder(location: Where) -> OutputFolder:
    """The model directory at `location` as an output (`core.output.OutputFolder`), replaced whole and only when
    it holds nothing but a model's files: locally staged in `.model.partial` beside it and swapped in by two
    renames; in a store staged in a local scratch folder and copied up, the old model.safetensors removed first
    and the new one uploaded last, so no reader ever finds a model.safetensors beside another model's files."""
    return OutputFolder(location, ModelKind())


def training_run_id(train_dir: str | Path) -> str | None:
    """The MLflow run of the training in `train_dir` (what exported `default(train_dir)`), from the training
    state `interlingua train` keeps beside the model (`TRAIN_STATE`); None before any training."""
    from orchestration.adapters.state import StageRecord, read_state

    state = Location.of(train_dir, "train_dir").join(TRAIN_STATE)
    record = read_state(state.text, StageRecord)  # the part every stage's record has
    return record.run_id if record else None


def normalization(model_dir: Path) -> NormalizeConfig:
    """How the model's sentences were normalized: `prepare.normalize` of its config.yaml, read alone (safe
    YAML, validated by `core.normalize.NormalizeConfig`). A served model reads no more of its run config: the
    other sections, and today's schema of them, have no say in how it embeds. ModelDirError naming the file
    when that section does not hold a normalization."""
    import yaml
    from pydantic import ValidationError

    from core.normalize import NormalizeConfig

    path = Path(model_dir) / CONFIG_FILE
    boundary.check_no_links(model_dir, "the model directory")
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        section = (config.get("prepare") or {}).get("normalize") or {}
        return NormalizeConfig.model_validate(section)
    except (yaml.YAMLError, UnicodeDecodeError, AttributeError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelDirError(
            f"{path}: prepare.normalize is not a normalization ({first}); the model directory "
            "is damaged: export it again (`interlingua train`)"
        ) from None


def check(model_dir: _Location) -> _Location:
    """`model_dir` if it holds a model; ModelMissing (a FileNotFoundError) naming what is missing otherwise;
    BoundaryError when it holds a link (nothing is read through one: `core.boundary`)."""
    boundary.check_no_links(model_dir, "the model directory")
    where = Location.of(model_dir, "the model directory")
    missing = [name for name in REQUIRED if not where.join(name).exists()]
    if missing:
        _refuse_legacy(model_dir, where, missing)
        raise ModelMissing(
            f"{model_dir}: not a model directory (missing {', '.join(missing)}); "
            "`interlingua train` writes one to <run_dir>/train/model"
        )
    return model_dir


def _refuse_legacy(model_dir: str | Path, where: Location, missing: list[str]) -> None:
    """ModelDirError naming `interlingua upgrade-model` when `model_dir` (at `where`) is a model directory of an
    older version (model.pt, a torch pickle, in place of model.safetensors)."""
    if MODEL_FILE in missing and where.join(LEGACY_MODEL_FILE).exists():
        raise ModelDirError(
            f"{model_dir}: a model directory of an older version ({LEGACY_MODEL_FILE}, a torch pickle, which "
            f"interlingua no longer loads: unpickling runs code); convert it once with `interlingua upgrade-model "
            f"{model_dir}` (it reads only tensors and plain values), or export the model again"
        )


def trained_steps(model_dir: Path) -> int | None:
    """The optimizer steps its training had taken when the model was exported (its progress.json, written from
    `train.checkpoint.TrainingProgress`); None for a directory without one."""
    path = model_dir / PROGRESS_FILE
    return int(json.loads(path.read_text())["step"]) if path.is_file() else None


def record_lineage(model_dir: str | Path, data: Dataset, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Write `lineage.json`: the dataset's fingerprint and the sha256 of spm.model and model.safetensors, and
    `extra` (`compatible_with`, `compatible_with_sha256`: the model whose space it was trained to keep)."""
    where = Location.of(model_dir)
    lineage = {
        "dataset_fingerprint": data.fingerprint,
        "spm_sha256": where.join(SPM_FILE).sha256(),
        "model_sha256": where.join(MODEL_FILE).sha256(),
        **(extra or {}),
    }
    where.join(LINEAGE_FILE).write_json(lineage)
    return lineage


def lineage(model_dir: Path) -> dict[str, str]:
    """The recorded lineage ({} for a model directory exported before lineage.json existed)."""
    path = model_dir / LINEAGE_FILE
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelDirError(f"{path}: not readable ({exc}); export the model again (`interlingua train`)") from None


def verify(model_dir: Path) -> dict[str, str]:
    """Check model.safetensors and spm.model against the sha256 recorded in lineage.json, and spm.model against the
    tokenizer's sha256 recorded in model.safetensors itself (`check_trained_tokenizer`); the lineage, with the
    tokenizer's sha256 taken from the bundled spm.model when none was recorded. ModelDirError naming the
    file that differs."""
    boundary.check_no_links(model_dir, "the model directory")
    recorded = lineage(model_dir)
    record = dict(recorded)
    for name, key in ((MODEL_FILE, "model_sha256"), (SPM_FILE, "spm_sha256")):
        path = model_dir / name
        if not path.is_file():
            continue  # `check` and the loaders name a missing file
        actual = file_sha256(path)
        if key in record and record[key] != actual:
            raise ModelDirError(
                f"{path}: sha256 {actual[:12]} differs from {record[key][:12]} recorded in "
                f"{LINEAGE_FILE}: the file is damaged or was replaced; export the model again"
            )
        record.setdefault(key, actual)
    check_trained_tokenizer(model_dir, record.get("spm_sha256"), in_lineage="spm_sha256" in recorded)
    return record


def check_trained_tokenizer(model_dir: Path, spm_sha256: str | None, *, in_lineage: bool) -> None:
    """ModelDirError naming both hashes when the bundled spm.model (sha256 `spm_sha256`) is not the tokenizer
    model.safetensors records it was trained with; a warning when the model file records none (a model exported
    before it did) and lineage.json (`in_lineage`) does not either: its tokenizer cannot be checked."""
    model_path, spm_path = model_dir / MODEL_FILE, model_dir / SPM_FILE
    if spm_sha256 is None or not model_path.is_file():
        return  # `check` and the loaders name a missing file
    trained_with = meta(model_path).spm_sha256
    if trained_with is None:
        if not in_lineage:
            log.warning(
                "%s: neither %s nor the tokenizer's sha256 in %s (exported before they were recorded): "
                "cannot check that %s is the tokenizer it was trained with; a model trained now records it",
                model_dir,
                LINEAGE_FILE,
                MODEL_FILE,
                SPM_FILE,
            )
        return
    if trained_with != spm_sha256:
        # not a TokenizerMismatch: re-encoding with this spm.model (evaluate's fallback) would be as wrong
        raise ModelDirError(
            f"{spm_path}: sha256 {spm_sha256[:12]} is not the tokenizer {trained_with[:12]} "
            f"recorded in {model_path}: the model was trained with another {SPM_FILE}; put its own "
            "back, or export the model again"
        )


def check_tokenizer(model_dir: Path, data: Dataset) -> None:
    """ModelDirError unless the dataset was encoded with the model's own spm.model: token ids of another
    tokenizer give a silently wrong embedding."""
    record = verify(model_dir)
    model_spm, data_spm, data_dir = record.get("spm_sha256"), data.spm_sha256, data.location
    if model_spm is None:
        log.warning(
            "%s: no %s and no %s: cannot check that it was trained with the tokenizer of %s",
            model_dir,
            LINEAGE_FILE,
            SPM_FILE,
            data_dir,
        )
        return
    if model_spm != data_spm:
        raise TokenizerMismatch(
            f"{model_dir} was trained with tokenizer {model_spm[:12]} ({SPM_FILE}) but {data_dir} is encoded "
            f"with {str(data_spm)[:12]}: its token ids would give wrong embeddings. Use the dataset it was trained "
            "on (dataset_dir=...), or train a model on this one"
        )


def check_readable(model_dir: Path) -> Path:
    """On the driver, before workers load the model: its files are there (FileNotFoundError naming what is
    missing), model.safetensors and spm.model are those lineage.json records, and both load (ModelDirError naming the
    file). Otherwise every worker would fail on its own, and the reason would be buried in their tracebacks.
    Returns model.safetensors's path."""
    check(model_dir)
    verify(model_dir)
    load(model_dir / MODEL_FILE)  # the whole file: a truncated one fails only when read to its end
    load_tokenizer(model_dir / SPM_FILE)
    return model_dir / MODEL_FILE
