"""`interlingua translate`: text files (or stdin) of one sentence per line, or stored vectors (`--from-embeddings`),
translated in this process through the interlingua into a new text file (or stdout), one line per input line.

    made = translate_to_file(model, inputs, output, "en", "fr", beam=4)
    made = translate_to_file(model, ["vectors.npy"], output, None, "fr", from_embeddings=True)

Every line is checked before any work: an empty line, one longer than `max_chars` characters, or a line that is
not UTF-8 is one error naming its file and line. Stored vectors are `embed -o FILE.npy`'s array or `embed`'s
output folder; a folder embedded by another model is refused (its manifest names the model's sha256), and so is
an array of another dimension. The output is a new file, written whole (`Location.replace_bytes`) once every
line is translated: an existing file is never replaced, and an output that is one of the inputs is refused.
"""

from __future__ import annotations

import io
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.location import Location
from orchestration.config import ConfigError
from orchestration.embedding.lines import MAX_CHARS, CorpusError, read_line

log = logging.getLogger("interlingua.translate")
STDIO = "-"


@dataclass(frozen=True)
class Translated:
    rows: int
    source: str  # a language, or "vectors"
    target: str


def check_output(output: str, inputs: list[str]) -> None:
    """-o may be written: stdout, or a new file that is none of the inputs (its folder is checked with the other
    locations, `to_file.check_locations`)."""
    if output == STDIO:
        return
    target = Location.of(output, "-o")
    if any(name != STDIO and Location.of(name).identity == target.identity for name in inputs):
        raise ConfigError(f"-o {output} is also an input (-i); give another output file")
    if target.exists():
        raise ConfigError(
            f"-o {output} exists; interlingua writes translations only to a new file (it never replaces a file it "
            "cannot tell for its own): give another file, or move that one"
        )


def read_sentences(names: list[str], *, max_chars: int = MAX_CHARS) -> list[str]:
    """Every line of `names` (files, local or URIs, or "-" for stdin), checked: CorpusError naming the file and
    line of an empty one, of one longer than `max_chars` characters, or of one that is not UTF-8."""
    sentences: list[str] = []
    for name in names:
        where = "<stdin>" if name == STDIO else name
        stream = open(sys.stdin.fileno(), "rb", closefd=False) if name == STDIO else Location.of(name).open_input()
        with stream as handle:
            number = 0
            while line := read_line(handle, where, number + 1, max_chars=max_chars, first=number == 0):
                number += 1
                if line.cut:
                    raise CorpusError(
                        f"{where}:{number}: a line of more than {max_chars} characters, the most the model is "
                        "given (serve.max_sentence_chars): split it into sentences"
                    )
                if not line.text.strip():
                    raise CorpusError(f"{where}:{number}: an empty line; translate takes one sentence per line")
                sentences.append(line.text)
    return sentences


def read_vectors(name: str, translator) -> np.ndarray:
    """The vectors of `embed -o FILE.npy`'s array or of `embed`'s output folder, checked against the model:
    VectorError (exit 2) for another dimension, or a folder that another model embedded."""
    from evaluation.store import StoredEmbeddings
    from orchestration.adapters import model_dir as model_files
    from orchestration.embed.folder import is_embeddings_array
    from orchestration.embedding.translator import VectorError

    where = Location.of(name, "-i")
    if name.endswith(".npy"):
        if not where.exists():
            raise ConfigError(f"-i {name}: no such file")
        if not is_embeddings_array(where):
            raise VectorError(f"-i {name}: not an (N, D) array of floats, what `interlingua embed -o FILE.npy` writes")
        return np.load(io.BytesIO(where.read_bytes()), allow_pickle=False)
    try:
        stored = StoredEmbeddings.open(name)
    except FileNotFoundError:
        raise ConfigError(f"-i {name}: neither a .npy file nor an `interlingua embed` output folder") from None
    model = stored.meta.get("model")
    recorded = model.get("model_sha256") if isinstance(model, dict) else None
    ours = Location.of(translator.model_dir / model_files.MODEL_FILE).sha256()
    if recorded != ours:
        raise VectorError(
            f"-i {name}: these vectors are of another model's space (model.safetensors sha256 "
            f"{str(recorded)[:12]}), not this model's ({ours[:12]}); decode them with the model that embedded them"
        )
    return (
        np.concatenate([stored.rows(lang) for lang in stored.languages])
        if stored.languages
        else np.zeros((0, stored.dim))
    )


def translate_to_file(
    model: str | Path,
    inputs: list[str],
    output: str,
    source: str | None,
    target: str,
    *,
    beam: int = 1,
    from_embeddings: bool = False,
    max_chars: int = MAX_CHARS,
) -> Translated:
    """Translate `inputs` (sentences in `source`, or with `from_embeddings` stored vectors) into `target`, into
    the new file `output` ("-": stdout)."""
    from orchestration.adapters import model_dir
    from orchestration.embedding.translator import SentenceTranslator

    if beam < 1:
        raise ConfigError(f"--beam {beam}: must be at least 1")
    check_output(output, inputs)
    if not from_embeddings:  # `read_vectors` names a missing array or folder itself
        missing = [name for name in inputs if name != STDIO and not Location.of(name, "-i").exists()]
        if missing:
            raise ConfigError(f"-i {missing[0]}: no such file")
    translator = SentenceTranslator.load(model_dir.fetch(model))
    translator.check_target(target)
    if from_embeddings:
        vectors = np.concatenate([read_vectors(name, translator) for name in inputs])
        lines = translator.decode(vectors, target, beam=beam)
    else:
        assert source is not None, "-l names the sentences' language"
        translator.check_source(source)
        lines = translator.translate(read_sentences(inputs, max_chars=max_chars), source, target, beam=beam)
    text = "".join(line.replace("\n", " ") + "\n" for line in lines)
    if output == STDIO:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        check_output(output, inputs)  # again: a file put there while the lines were translated is never replaced
        Location.of(output, "-o").replace_bytes(text.encode("utf-8"))  # whole or not at all
    return Translated(len(lines), "vectors" if from_embeddings else str(source), target)
