"""The monolingual sentences of one language, normalized as at training time and deduplicated; the
files (local or URIs) are found and read by `embedding.inputs`, the one input reader (that of `embed` and the
test sets)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

from core.location import Location
from core.normalize import NormalizeConfig, Normalizer
from orchestration.config.stages import MineConfig, MineInput
from orchestration.embedding.inputs import CorpusError, read_column, read_lines, resolve_inputs
from orchestration.mine import MineError

log = logging.getLogger(__name__)


@dataclass
class Sentences:
    """One language's distinct sentences (normalized), the raw text of each, and what was dropped."""

    lang: str
    texts: list[str] = field(default_factory=list)  # normalized, distinct
    raw: list[str] = field(default_factory=list)  # the first raw line of each
    read: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> lines


def input_files(spec: MineInput) -> list[str]:
    """The files of an input (a local path or a URI): a file, a glob or every visible file of a directory
    (prefix), sorted. MineError when none matches; StorageError for a URI of an unsupported scheme."""
    try:
        return resolve_inputs([spec.path], what=f"mine.inputs ({spec.lang})")
    except CorpusError:
        raise MineError(f"mine.inputs ({spec.lang}): no file matches {spec.path!r}") from None


def check_inputs(m: MineConfig) -> None:
    """MineError naming the input and what to do, before any model is loaded or sentence embedded: an input
    matching no file, or holding no sentence; a Parquet input without its column; a missing gold file."""
    for spec in m.inputs:
        if not any([_has_sentence(path, spec) for path in input_files(spec)]):  # every file: each column checked
            raise MineError(
                f"mine.inputs ({spec.lang}): {spec.path}: no sentence to mine (empty); "
                "give files with one sentence per line"
            )
    gold = m.gold.path if m.gold is not None else None
    if gold is not None and not Location.of(gold, "mine.gold.path").exists():
        raise MineError(
            f"mine.gold.path: {gold}: file not found; give a TSV file of true pairs (source<TAB>target "
            "per line), or mine.gold={split: dev}"
        )


def _has_sentence(path: str, spec: MineInput) -> bool:
    """Whether the file holds a non-blank line (text) or a row (Parquet, whose column is checked)."""
    if spec.format == "parquet":
        import pyarrow as pa

        try:
            meta = Location.of(path).open_parquet().metadata
        except (pa.ArrowException, OSError) as exc:
            raise MineError(f"mine.inputs ({spec.lang}): {path}: not a readable Parquet file ({exc})") from None
        names = meta.schema.to_arrow_schema().names
        if spec.column not in names:
            raise MineError(
                f"mine.inputs ({spec.lang}): {path} has no column {spec.column!r} (it has "
                f"{', '.join(names)}); set the input's column"
            )
        return meta.num_rows > 0
    with Location.of(path).open_input() as handle:
        return any(line.strip() for line in handle)  # stops at the first sentence


def read_sentences(spec: MineInput, normalize: NormalizeConfig) -> Sentences:
    """The input's distinct non-empty sentences; empty lines and duplicates counted, not kept."""
    normalizer, out, seen = Normalizer(normalize), Sentences(spec.lang), set()
    for path in input_files(spec):
        for raw in _lines(path, spec):
            out.read += 1
            text, _ = normalizer(raw, spec.lang)
            reason = "empty" if not text else "duplicate" if text in seen else None
            if reason:
                out.dropped[reason] = out.dropped.get(reason, 0) + 1
                continue
            seen.add(text)
            out.texts.append(text)
            out.raw.append(raw)
    if not out.texts:  # every line empty once normalized: nothing to embed
        raise MineError(f"mine.inputs ({spec.lang}): {spec.path}: no sentence to mine ({out.read} lines, all empty)")
    log.info(
        "%s: %d lines, %d distinct sentences (dropped: %s)",
        spec.lang,
        out.read,
        len(out.texts),
        ", ".join(f"{r} {n}" for r, n in out.dropped.items()) or "none",
    )
    return out


def _lines(path: str, spec: MineInput) -> Iterator[str]:
    """The file's sentences, read by the one input reader of `embed` (`embedding.inputs`): UTF-8 checked, line
    ends and an opening BOM dropped, a null Parquet value as an empty sentence."""
    try:
        if spec.format == "parquet":
            yield from read_column(path, spec.column)
            return
        with Location.of(path).open_input() as handle:
            yield from read_lines(handle, path)
    except CorpusError as exc:
        raise MineError(str(exc)) from None
