"""What `interlingua evaluate` measures: the model (or the USE baseline), the languages, the engine, and what
an evaluation depends on (its fingerprint, the stage cache's key).

    encoder = resolve_encoder(config, model_dir)   # Encoder: model_path, languages, steps, backend...
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from core.dataset import Dataset, file_sha256, fingerprint
from orchestration.adapters import model_dir as model_files
from orchestration.config import Config, ConfigError, evaluated_languages
from orchestration.embedding import backends
from orchestration.evaluate import EvaluateError

log = logging.getLogger(__name__)


@dataclass
class Encoder:
    """What is evaluated: a model file, or the USE baseline (`model_path` None)."""

    model_path: Path | None
    languages: list[str]  # the evaluated ones
    steps: int | None  # the optimizer steps of the model's training (None: the USE baseline, or unknown)
    reencode: bool = False  # the dataset's token ids are of another tokenizer: the model reads the text
    known: list[str] | None = None  # every language the model embeds (None: the USE baseline, many)
    backend: str = "torch"  # the engine that runs it (`embedding.backends`, resolved: never "auto")
    shared: bool = False  # one encoder for every language: it also embeds languages it never saw (test sets)


def resolve_encoder(
    config: Config, model_dir: Path | None, *, reencode: bool = False, own_text: bool = False
) -> Encoder:
    """The evaluated model and the languages measured; EvaluateError when there is no model or the dataset
    lacks its languages, ModelDirError when its files are damaged or its tokenizer is not the dataset's
    (unless `reencode`: then the model reads the split's text with its own normalization and spm.model).
    `own_text`: the model reads text with its own tokenizer (a test set), so the dataset's tokenizer does not
    matter."""
    data = Dataset.open(config.data_dir)
    if config.evaluate.encoder == "use":
        available = config.train.languages or data.languages
        return Encoder(None, _languages(config, available), None)
    model_dir = model_files.fetch(model_dir or model_files.default(config.train_dir)).resolve()
    model_path = model_dir / model_files.MODEL_FILE
    if not model_path.is_file():
        raise EvaluateError(f"{model_path}: no trained model; run `interlingua train` first or pass --model")
    # `auto`: the fastest engine whose embeddings are the model's own (an export's fp32), never its int8
    r = config.runtime
    backend = backends.resolve(model_dir, r.backend, device="cuda" if r.use_gpu else "cpu", exact=True)
    if own_text:
        model_files.verify(model_files.check(model_dir))  # it reads the text with its own spm.model: the right one?
        args = model_files.load(model_path)[0].args
        return Encoder(
            model_path,
            _languages(config, args.languages),
            model_files.trained_steps(model_dir),
            known=list(args.languages),
            backend=backend,
            shared=args.shared_encoder,
        )
    mismatch = False
    try:
        model_files.check_tokenizer(model_dir, data)
    except model_files.TokenizerMismatch:
        if not reencode:
            raise
        mismatch = True
        log.warning(
            "%s was trained with another tokenizer than %s: re-encoding the split's text with its own "
            "normalization and %s",
            model_dir,
            config.data_dir,
            model_files.SPM_FILE,
        )
    languages = model_files.load(model_path)[0].languages
    lacking = [lang for lang in languages if lang not in data.languages]
    if lacking and config.evaluate.languages is None:
        raise EvaluateError(
            f"{model_path} embeds {languages}; {config.data_dir} lacks {lacking}: set "
            f"evaluate.languages to some of {data.languages}"
        )
    available = [lang for lang in languages if lang in data.languages]
    return Encoder(
        model_path, _languages(config, available), model_files.trained_steps(model_dir), mismatch, languages, backend
    )


def _newer_keys_off(config: Config) -> set[str]:
    """The evaluate keys added after the first evaluations (translation, transfer) that are at their defaults."""
    e = config.evaluate
    off: tuple[tuple[str, object], ...] = (
        ("translation_rows", 0),
        ("translation_beam", 1),
        ("transfer", []),
        ("transfer_languages", None),
    )
    return {key for key, value in off if getattr(e, key) == value}


def eval_fingerprint(config: Config, encoder: Encoder, data: str, verified: dict[str, str]) -> str:
    """What an evaluation depends on: the model file, the data searched (a fingerprint) and the sha256 of
    the files read (`verified`: a shard changed under an unchanged manifest is other data), the evaluate
    config (but the list of test sets: adding one changes no other evaluation), and the engine when it is not
    torch (an evaluation made before the engines existed keeps its fingerprint)."""
    return fingerprint(
        {
            "model": model_identity(config, encoder),
            "data": data,
            "files": verified,
            # the translation and transfer keys at their defaults are left out: the fingerprint of before they existed
            "evaluate": config.evaluate.model_dump(exclude={"testsets", *_newer_keys_off(config)}),
            **({"backend": encoder.backend} if encoder.backend != "torch" else {}),
        }
    )


def model_identity(config: Config, encoder: Encoder) -> str:
    """The evaluated model's identity: its file's sha256, or the baseline's name."""
    return file_sha256(encoder.model_path) if encoder.model_path else config.evaluate.encoder


def _languages(config: Config, available: list[str]) -> list[str]:
    try:
        return evaluated_languages(config, available)
    except ConfigError as exc:
        raise EvaluateError(str(exc)) from None
