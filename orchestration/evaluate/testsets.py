"""Test sets beside the dataset's split (`evaluate.testsets`): read, checked, and held as their texts.

    testset = load_testset(spec, model_languages)   # Testset: name, table (key, <lang>_text...), identity

Two kinds, both embedded from their text by each model with its own
normalization and sentencepiece model (`embedding.embedder.SentenceEmbedder`), so
that models with different tokenizers are measured on the same input:

- `files`: one line-aligned file per language (the xx-en similarity sets of
  1,000 pairs, or N-way dev/devtest sets with one file per language). A line
  that is empty in any language drops its tuple (counted as `empty`).
- `dataset`: a prepared dataset's split, pinned by its manifest fingerprint: a
  frozen evaluation set for champion decisions, so that decisions stay
  comparable when new data changes the run's own split. A tuple lacking an
  evaluated language is dropped (counted as `incomplete`).

Test sets are small (thousands of lines), so the driver reads them whole.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, final

import pyarrow as pa
import pyarrow.compute as pc

from core.dataset import MANIFEST, Dataset, DatasetError, fingerprint
from core.location import Location
from core.regular import check_regular_file
from orchestration.config.stages import TestsetConfig
from orchestration.evaluate import EvaluateError

log = logging.getLogger(__name__)


class FileIdentity(TypedDict):
    """A file of a test set: where it was read (absolute, or a URI) and its sha256."""

    path: str
    sha256: str


@final
class FilesIdentity(TypedDict):
    """A files test set's identity: each language's file and its sha256."""

    files: dict[str, FileIdentity]


@final
class DatasetIdentity(TypedDict):
    """A pinned dataset's identity: its folder, the split and the manifest's fingerprint."""

    dataset: str
    split: str
    fingerprint: str


@dataclass
class Testset:
    name: str
    table: pa.Table  # key (line number or tuple key, in order), then <lang>_text per language
    languages: list[str]
    identity: FilesIdentity | DatasetIdentity  # as fingerprinted (`data`) and logged (`lineage`)
    read: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    verified: dict[str, str] = field(default_factory=dict)  # every file read -> its sha256, as checked

    @property
    def data(self) -> str:
        """What is searched, as logged with evaluations and decisions: a pinned dataset's manifest
        fingerprint and split, or a fingerprint of the files' sha256."""
        if "dataset" in self.identity:
            return f"{self.identity['fingerprint']}/{self.identity['split']}"
        return fingerprint(self.identity)


def load_testset(spec: TestsetConfig, languages: list[str], *, shared: bool = False) -> Testset:
    """The test set of `spec` over the evaluated `languages` (a files set: its own, each of which the
    model must know, unless its one `shared` encoder embeds every language: a language it never saw is then
    measured, with a warning naming it). EvaluateError naming the test set and file on bad input."""
    if spec.files is not None:
        unknown = [lang for lang in spec.files if lang not in languages]
        if unknown and not shared:
            raise EvaluateError(
                f"evaluate.testsets {spec.name}: the model knows {languages}, not {unknown} (its encoders are "
                "per language: a language it was not trained on has none)"
            )
        if unknown:
            log.warning(
                "test set %s: %s never seen in training (the model knows %s): embedded by its shared encoder over "
                "the joint vocabulary, as unseen languages",
                spec.name,
                unknown,
                languages,
            )
        testset = _from_files(spec, spec.files)
    elif spec.dataset is not None:
        testset = _from_dataset(spec, spec.dataset, languages)
    else:  # TestsetConfig's own validator refuses this; a config built around it is refused here
        raise EvaluateError(f"evaluate.testsets {spec.name}: give exactly one of files and dataset")
    if len(testset.table) < 2:
        raise EvaluateError(
            f"evaluate.testsets {spec.name}: {len(testset.table)} complete tuples of "
            f"{testset.read} (dropped: {testset.dropped}); the search needs at least 2"
        )
    if testset.dropped:
        log.warning(
            "test set %s: %d of %d tuples dropped (%s)",
            spec.name,
            sum(testset.dropped.values()),
            testset.read,
            ", ".join(f"{reason} {n}" for reason, n in testset.dropped.items()),
        )
    return testset


MAX_UNKNOWN_SHARE = 0.5  # an unseen language whose characters are mostly unknown to the vocabulary: refused


def check_tokenizable(testset: Testset, unseen: list[str], model_dir: Path) -> None:
    """EvaluateError when the model's vocabulary cannot write an unseen language of the test set: more than
    `MAX_UNKNOWN_SHARE` of its characters (spaces aside, once normalized as the model normalizes) are no piece
    of its sentencepiece model, so that they all become the unknown piece (a script the training never saw)."""
    from collections import Counter

    from core.dataset import UNK_ID
    from core.normalize import Normalizer
    from orchestration.adapters import model_dir as model_files

    processor = model_files.load_tokenizer(model_dir / model_files.SPM_FILE)
    normalizer = Normalizer(model_files.normalization(model_dir))
    for lang in unseen:
        chars = Counter(c for t in testset.table[f"{lang}_text"].to_pylist() for c in normalizer(t, lang)[0])
        written = {c: processor.piece_to_id(c) != UNK_ID for c in chars if not c.isspace()}
        total = sum(chars[c] for c in written)
        share = sum(chars[c] for c, known in written.items() if not known) / max(total, 1)
        if share > MAX_UNKNOWN_SHARE:
            raise EvaluateError(
                f"evaluate.testsets {testset.name}: the model cannot tokenize {lang}: {100 * share:.0f} % of its "
                f"characters are unknown to the model's vocabulary ({model_dir / model_files.SPM_FILE}); a model "
                "trained on its script is needed"
            )


def _from_files(spec: TestsetConfig, files: dict[str, str]) -> Testset:
    from orchestration.embedding.inputs import CorpusError, read_lines

    columns: dict[str, list[str]] = {}
    identity: dict[str, FileIdentity] = {}
    for lang, name in files.items():
        location = Location.of(name)  # a local path (made absolute) or a URI
        # a FIFO would block the read until killed, a device never ends: refused by what it is (a link to a file
        # is the file: the test set's files are the user's own)
        where = f"evaluate.testsets {spec.name} ({lang})"
        location.check_regular_file(where, error=EvaluateError, follow_links=True, advice="give a regular text file")
        if not location.exists():
            raise EvaluateError(f"evaluate.testsets {spec.name}: {location} ({lang}) is not a file")
        raw = location.read_bytes()  # read once: the lines and their sha256 come from the same bytes
        try:
            columns[lang] = list(read_lines(io.BytesIO(raw), location.text))
        except CorpusError as exc:
            raise EvaluateError(f"evaluate.testsets {spec.name}: {exc}") from None
        identity[lang] = FileIdentity(path=location.text, sha256=hashlib.sha256(raw).hexdigest())
    counts = {lang: len(lines) for lang, lines in columns.items()}
    if len(set(counts.values())) > 1:
        raise EvaluateError(
            f"evaluate.testsets {spec.name}: the files must be line-aligned, but have "
            + ", ".join(f"{files[lang]} {n} lines" for lang, n in counts.items())
        )
    read = next(iter(counts.values()))
    keep = [i for i in range(read) if all(lines[i].strip() for lines in columns.values())]
    table = pa.table(
        {
            "key": [f"{i + 1:09d}" for i in keep],
            **{f"{lang}_text": [lines[i] for i in keep] for lang, lines in columns.items()},
        }
    )
    dropped = {"empty": read - len(keep)} if read > len(keep) else {}
    verified = {entry["path"]: entry["sha256"] for entry in identity.values()}
    return Testset(spec.name, table, list(columns), FilesIdentity(files=identity), read, dropped, verified)


def _from_dataset(spec: TestsetConfig, dataset: str, languages: list[str]) -> Testset:
    folder = Location.of(dataset)
    check_regular_file(folder / MANIFEST, f"evaluate.testsets {spec.name}", error=EvaluateError)
    if not (folder / MANIFEST).exists():
        raise EvaluateError(f"evaluate.testsets {spec.name}: {folder} holds no prepared dataset ({MANIFEST})")
    data = Dataset.open(folder)
    if spec.fingerprint is None:
        raise EvaluateError(
            f"evaluate.testsets {spec.name}: pin the dataset with fingerprint: "
            f"{data.fingerprint} (its manifest's), so that a changed set is refused"
        )
    if data.fingerprint != spec.fingerprint:
        raise EvaluateError(
            f"evaluate.testsets {spec.name}: {folder} has fingerprint {data.fingerprint}, "
            f"pinned {spec.fingerprint}: the pinned set changed; restore it, or pin the new one"
        )
    missing = [lang for lang in languages if lang not in data.languages]
    if missing:
        raise EvaluateError(f"evaluate.testsets {spec.name}: {folder} has no {missing} (it holds {data.languages})")
    # the fingerprint pins what the manifest says; the shards' sha256 pin what is read (the text: no spm)
    try:
        data.verify((spec.split,), spm=False)
    except DatasetError as exc:
        raise EvaluateError(f"evaluate.testsets {spec.name}: the pinned set changed: {exc}") from None
    table = data.read(spec.split, ["key", *[f"{lang}_text" for lang in languages]])
    read = len(table)
    table = table.filter(functools.reduce(pc.and_, [pc.is_valid(table[f"{lang}_text"]) for lang in languages]))
    table = _cut(table.sort_by("key"), [f"{lang}_text" for lang in languages], f"{folder} {spec.split}")
    dropped = {"incomplete": read - len(table)} if read > len(table) else {}
    identity = DatasetIdentity(dataset=folder.text, split=spec.split, fingerprint=spec.fingerprint)
    return Testset(spec.name, table, list(languages), identity, read, dropped, data.sha256((spec.split,), spm=False))


def _cut(table: pa.Table, columns: list[str], where: str) -> pa.Table:
    """`table` with each text of `columns` cut to the characters the model is given (`inputs.MAX_CHARS`), as a
    files test set's lines are, the texts cut counted in the log (`inputs.warn_cut`)."""
    from orchestration.embedding.inputs import MAX_CHARS, warn_cut

    for name in columns:
        longer = pc.sum(pc.greater(pc.utf8_length(table[name]), MAX_CHARS)).as_py() or 0
        if longer:
            warn_cut(f"{where} {name}", longer, len(table), MAX_CHARS)
            cut = pc.utf8_slice_codeunits(table[name], 0, MAX_CHARS)
            table = table.set_column(table.schema.get_field_index(name), name, cut)
    return table
