"""Reading a model directory's files (`orchestration.adapters.model_dir`), and the errors that name what is wrong
with one: the weights (`load`, `meta`: model.safetensors) and the tokenizer (`load_tokenizer`: spm.model), each
file that cannot be read refused with a ModelDirError naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from core import boundary
from core.errors import UserError

if TYPE_CHECKING:
    from model.args import ModelMeta

_Read = TypeVar("_Read")


class ModelDirError(UserError, RuntimeError):
    """A model directory that is corrupt, or of another tokenizer than the data it would be fed."""


class ModelMissing(ModelDirError, FileNotFoundError):
    """A path that holds no model directory."""


class TokenizerMismatch(ModelDirError):
    """A model fed token ids of another sentencepiece model than its own."""


def load(model_path: Path, map_location: Any = "cpu"):
    """`model.model_file.load_model` of `model_path`, with ModelDirError naming the file when it cannot be read
    (truncated, not a model)."""
    from model.model_file import load_model

    boundary.check_no_links(Path(model_path).parent, "the model directory")
    return _readable(model_path, lambda: load_model(str(model_path), map_location=map_location))


def meta(model_path: Path) -> ModelMeta:
    """The metadata saved in `model_path` (step, dev error, the tokenizer's sha256), without its weights;
    ModelDirError naming the file when it cannot be read."""
    from model.model_file import load_meta

    return _readable(model_path, lambda: load_meta(str(model_path)))


def _readable(model_path: Path, read: Callable[[], _Read]) -> _Read:
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
