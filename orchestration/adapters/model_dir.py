"""The exported model directory: everything needed to embed raw text, and nothing else.

    <run_dir>/train/model/
        model.safetensors  `model.nmt.save_model`: the weights; constructor arguments, step and dev error as
                        JSON in its header (nothing in the directory is code: reading it runs none)
        spm.model       the dataset's sentencepiece model
        config.yaml     the resolved run config (normalization, model, train)
        progress.json   the training progress at export (step, dev error, history)
        lineage.json    what it was made from: the dataset's fingerprint, the sha256 of spm.model and
                        model.safetensors
    (model.safetensors also records the sha256 of the spm.model it was trained with, since lineage.json is
    optional). A directory of an older version holds model.pt (a torch pickle) instead: readers refuse it,
    naming `interlingua upgrade-model` (`embed.export.upgrade_model_dir`), which converts it once.

`interlingua train` writes it (from a checkpoint), `evaluate`, `search`,
`embed` and the MLflow pyfunc model read it; a registered model carries it.
Readers verify it first (`verify`): model.safetensors and spm.model against their
recorded sha256, and (`check_tokenizer`) that a dataset whose token ids it
is fed was encoded with the model's own spm.model.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from core import boundary, fencing, ownership, storage, transfer
from core.dataset import CONFIG_FILE, SPM_MODEL, Dataset, file_sha256
from core.errors import UserError

if TYPE_CHECKING:
    from core.normalize import NormalizeConfig
    from model.args import ModelMeta

log = logging.getLogger(__name__)

_Location = TypeVar("_Location", bound=storage.Location)  # what `check` is given, a str or a Path, it returns

MODEL_FILE = "model.safetensors"
LEGACY_MODEL_FILE = "model.pt"  # the older versions' torch pickle: converted by `upgrade-model`, never loaded as such
SPM_FILE = SPM_MODEL
PROGRESS_FILE = "progress.json"
LINEAGE_FILE = "lineage.json"
REQUIRED = (MODEL_FILE, SPM_FILE, CONFIG_FILE)
FILES = (*REQUIRED, PROGRESS_FILE, LINEAGE_FILE, LEGACY_MODEL_FILE)  # all a model directory holds
CHECKPOINT_STATE = "state.pt"  # in a training checkpoint: what a resume needs beside the model
TRAIN_STATE = "run.json"  # beside the model, in the train directory: the training's fingerprint, run and step


class ModelDirError(UserError, RuntimeError):
    """A model directory that is corrupt, or of another tokenizer than the data it would be fed."""


class ModelMissing(ModelDirError, FileNotFoundError):
    """A path that holds no model directory."""


class TokenizerMismatch(ModelDirError):
    """A model fed token ids of another sentencepiece model than its own."""


def default(train_dir: str | Path) -> str | Path:
    """Where `interlingua train` exports the run's model (a URI under a URI, a Path under a Path)."""
    return storage.join(train_dir, "model") if storage.is_uri(train_dir) else Path(train_dir) / "model"


def fetch(location: str | Path) -> Path:
    """A local model directory holding the model at `location`: itself when local; for a URI, a copy in this
    user's cache folder (`transfer.cache_dir("models")/<model.safetensors sha256>`), downloaded once per host,
    user and model (torch and sentencepiece read local files) and verified on every use against the sha256
    the source records. ModelMissing naming the URI when it holds none."""
    if not storage.is_uri(location):
        return Path(location)
    check(location)
    # the key: the model's sha256 as lineage.json records it (one small read; hashing the model at the URI
    # reads it whole once more), else hashed there (a model exported before lineage.json existed)
    try:
        key = storage.read_json(storage.join(location, LINEAGE_FILE)).get("model_sha256")
    except (OSError, ValueError, AttributeError):
        key = None
    key = key or storage.sha256(storage.join(location, MODEL_FILE))

    def check_copy(copy: Path) -> None:
        # on every use: the files against the copy's lineage.json, and its model against the source's sha256
        actual = verify(copy).get("model_sha256")
        if actual != key:
            raise ModelDirError(
                f"{copy / MODEL_FILE}: sha256 {str(actual)[:12]} is not {key[:12]}, the model {location} records"
            )

    return transfer.cached_copy(location, "models", key, check=check_copy)


def publish(local: Path, location: str | Path) -> None:
    """Put the finished local model directory `local` at `location`, replacing a model there only if it holds
    nothing but a model's files (`check_replaceable`). Locally by two renames (`ownership.swap_in`); at a URI
    the old model.safetensors is removed first and the new one uploaded last, so no reader ever finds a
    model.safetensors beside another model's files."""
    fencing.check()
    if not storage.is_uri(location):
        target = Path(location)
        previous = check_replaceable(target) if target.exists() else None
        ownership.swap_in(local, target, previous)
        return
    previous = check_replaceable(location)
    if MODEL_FILE in previous:
        storage.delete_file(storage.join(location, MODEL_FILE))
    names = [n for n in storage.files(local) if n != ownership.STAGING_MARKER]
    for name in sorted(names, key=lambda n: n == MODEL_FILE):
        storage.write_bytes(storage.join(location, name), (local / name).read_bytes())
    stale = [n for n in previous if n not in names]
    if stale:
        ownership.remove_ours(location, stale, keep_root=True)


def training_run_id(train_dir: str | Path) -> str | None:
    """The MLflow run of the training in `train_dir` (what exported `default(train_dir)`), from the training
    state `interlingua train` keeps beside the model (`TRAIN_STATE`); None before any training."""
    from orchestration.adapters.state import StageRecord, read_state

    record = read_state(storage.join(train_dir, TRAIN_STATE), StageRecord)  # the part every stage's record has
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
    missing = [name for name in REQUIRED if not storage.exists(storage.join(model_dir, name))]
    if missing:
        _refuse_legacy(model_dir, missing)
        raise ModelMissing(
            f"{model_dir}: not a model directory (missing {', '.join(missing)}); "
            "`interlingua train` writes one to <run_dir>/train/model"
        )
    return model_dir


def _refuse_legacy(model_dir: str | Path, missing: list[str]) -> None:
    """ModelDirError naming `interlingua upgrade-model` when `model_dir` is a model directory of an older
    version (model.pt, a torch pickle, in place of model.safetensors)."""
    if MODEL_FILE in missing and storage.exists(storage.join(model_dir, LEGACY_MODEL_FILE)):
        raise ModelDirError(
            f"{model_dir}: a model directory of an older version ({LEGACY_MODEL_FILE}, a torch pickle, which "
            f"interlingua no longer loads: unpickling runs code); convert it once with `interlingua upgrade-model "
            f"{model_dir}` (it reads only tensors and plain values), or export the model again"
        )


def check_replaceable(model_dir: storage.Location) -> list[str]:
    """The files of `model_dir` once it holds nothing but a model's (what an export may replace);
    ForeignDataError naming the others."""
    return ownership.check_only_ours(
        model_dir,
        lambda e: e in FILES,
        what="the model directory",
        advice="move those files out of it; interlingua replaces only its model's files",
    )


def trained_steps(model_dir: Path) -> int | None:
    """The optimizer steps its training had taken when the model was exported (its progress.json, written from
    `train.checkpoint.TrainingProgress`); None for a directory without one."""
    path = model_dir / PROGRESS_FILE
    return int(json.loads(path.read_text())["step"]) if path.is_file() else None


def record_lineage(model_dir: str | Path, data: Dataset) -> dict[str, str]:
    """Write `lineage.json`: the dataset's fingerprint and the sha256 of spm.model and model.safetensors."""
    lineage = {
        "dataset_fingerprint": data.fingerprint,
        "spm_sha256": file_sha256(storage.join(model_dir, SPM_FILE)),
        "model_sha256": file_sha256(storage.join(model_dir, MODEL_FILE)),
    }
    storage.write_json(storage.join(model_dir, LINEAGE_FILE), lineage)
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


def load(model_path: Path, map_location: Any = "cpu"):
    """`model.nmt.load_model` of `model_path`, with ModelDirError naming the file when it cannot be read
    (truncated, not a model)."""
    from model.nmt import load_model

    boundary.check_no_links(Path(model_path).parent, "the model directory")
    return _readable(model_path, lambda: load_model(str(model_path), map_location=map_location))


def meta(model_path: Path) -> ModelMeta:
    """The metadata saved in `model_path` (step, dev error, the tokenizer's sha256), without its weights;
    ModelDirError naming the file when it cannot be read."""
    from model.nmt import load_meta

    return _readable(model_path, lambda: load_meta(str(model_path)))


def _readable(model_path: Path, read):
    from safetensors import SafetensorError

    try:
        return read()
    except FileNotFoundError:
        raise
    except (OSError, RuntimeError, EOFError, KeyError, TypeError, ValueError, SafetensorError) as exc:
        raise ModelDirError(
            f"{model_path}: not a readable model file ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); export it again"
        ) from None


def load_tokenizer(spm_path: Path):
    """The sentencepiece processor of `spm_path`, with ModelDirError naming the file when it is not one."""
    import sentencepiece as spm

    try:
        return spm.SentencePieceProcessor(model_file=str(spm_path))
    except (OSError, RuntimeError) as exc:
        raise ModelDirError(
            f"{spm_path}: not a readable sentencepiece model ({str(exc).splitlines()[0]}); export the model again"
        ) from None


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
