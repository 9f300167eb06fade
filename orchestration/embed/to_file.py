"""`embed -o FILE.npy`: the sentences of `-i` (files or stdin) embedded in this process into one (N, D) array,
and the checks every `embed` makes of its locations before any work.

    check_locations(inputs, output, model)           # -i, -o, --model: valid, reachable, -o's parent there
    made = embed_to_file(model, inputs, output, lang, dtype=..., force=..., backend=...)

The array is written whole or not at all (`Location.replace_bytes`: a new file renamed into place). A file at
`-o` is replaced only with `force` and only when it is an (N, D) array of floats, what `embed` writes; never
one of the inputs.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

from core.location import Location
from core.ownership import ForeignDataError
from orchestration.config import ConfigError


@dataclass(frozen=True)
class Embedded:
    rows: int
    empty: int
    dim: int


def check_locations(inputs: list[str], output: str, model: str | Path) -> None:
    """Before any embedding work: every -i, -o and --model a local path or a URI of a supported scheme
    (StorageError, exit 2), each store they name answering (StoreUnreachable, exit 1), and a local -o's
    parent an existing directory (ConfigError)."""
    named = [(Location.of(name, "-i"), "-i") for name in inputs if name != "-"]
    target, weights = Location.of(output, "-o"), Location.of(model, "--model")
    for location, flag in [(target, "-o"), (weights, "--model"), *named]:
        location.check_reachable(flag)  # a URI's store; local paths are not checked here
    local = target.local_path
    if local is not None:
        parent = local.resolve().parent
        if not parent.is_dir():
            raise ConfigError(f"-o {output}: directory {parent} does not exist; create it first")


def check_npy_output(output: str, inputs: list[str], force: bool) -> None:
    """-o FILE.npy may be written: a new file, or with `force` an (N, D) array of floats (what `embed` writes),
    never one of the inputs. ConfigError, or ForeignDataError when the file there is not such an array."""
    from orchestration.embed.folder import is_embeddings_array

    # a local path with its links resolved: -i a -o link-to-a is one file
    if any(name != "-" and Location.of(name).identity == Location.of(output).identity for name in inputs):
        raise ConfigError(f"-o {output} is also an input (-i); give another output file")
    target = Location.of(output, "-o")
    if not target.exists():
        return
    if not force:
        raise ConfigError(f"-o {output} exists; pass --force to replace it, or give another file")
    if not is_embeddings_array(target):
        raise ForeignDataError(
            f"-o {output}: this file is not an (N, D) array of embeddings, so not one "
            "interlingua wrote; it never overwrites such a file, even with --force: move it "
            "or give another output file"
        )


def embed_to_file(
    model: str | Path, inputs: list[str], output: str, lang: str, *, dtype: str, force: bool, backend: str
) -> Embedded:
    """Embed `inputs` (files, or "-" for stdin) in language `lang` with the model at `model` into the array
    file `output` (checked by `check_npy_output` first)."""
    import numpy as np

    from orchestration.adapters import model_dir
    from orchestration.embed.corpus import embed_in_process
    from orchestration.embedding.embedder import SentenceEmbedder

    check_npy_output(output, inputs, force)
    if any(name.endswith(".parquet") for name in inputs):
        raise ConfigError("Parquet input needs an output directory (-o DIR), not a .npy file")
    missing = [name for name in inputs if name != "-" and not Location.of(name, "-i").exists()]
    if missing:
        raise ConfigError(f"-i {missing[0]}: no such file")
    embedder = SentenceEmbedder.load(model_dir.fetch(model), backend=backend)
    if lang not in embedder.languages:
        raise ConfigError(f"-l {lang}: the model knows {embedder.languages}")
    vectors, empty = embed_in_process(embedder, inputs, lang)
    buffer = io.BytesIO()
    np.save(buffer, vectors.astype(dtype))
    Location.of(output, "-o").replace_bytes(buffer.getvalue())  # whole or not at all; never a file beside it
    return Embedded(len(vectors), empty, int(vectors.shape[1]))
