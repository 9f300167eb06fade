"""The model `interlingua serve` answers with, and the champion hot-swap. No Ray here: the deployment
(serve/app.py) holds one `ModelSlot` per replica.

    source = ModelSource(config)                      # serve.model: "champion" or a model directory
    slot = ModelSlot(source.load(source.current_version()))
    with slot.use() as served:                        # a request (or a batch) holds the model it started on
        served.embedder.embed(sentences, lang)
    await slot.swap(source.load(new_version))         # later: switch, then drain the old one

The swap never fails a request: the new version is loaded beside the old one while the old one answers,
the switch is one assignment (requests that start afterwards get the new one), and the old one is dropped
(its downloaded folder removed) only once the requests holding it have finished, or after
`serve.drain_timeout_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.dataset import file_sha256
from core.errors import UserError
from core.location import Location
from orchestration.adapters import model_dir as model_files
from orchestration.adapters.model_choice import champion_version, choose_model
from orchestration.adapters.tracker import Tracker
from orchestration.config import Config
from orchestration.embedding.embedder import SentenceEmbedder

# Ray Serve sends its replicas' "ray.serve" loggers to the replica log and the driver's stderr.
log = logging.getLogger(f"ray.serve.{__name__}")


@dataclass(eq=False)
class ServedModel:
    """One loaded model version and the requests that hold it."""

    version: str  # the registered version number ("3"), or a model directory's model sha256 prefix
    embedder: SentenceEmbedder
    folder: Path
    store: Any = None  # its stored embedding set (evaluation.store.StoredEmbeddings) for /embed's nearest
    download: tempfile.TemporaryDirectory | None = None  # the folder it was downloaded to, removed once drained
    translator: Any = None  # its SentenceTranslator, made by the first /translate (`translation`)
    in_flight: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def searchable(self) -> list[str] | None:
        """The languages /embed's "nearest" can search: those of the stored set that it holds the texts of
        (with their keys); None without a stored set. A language the model knows may be missing from it
        (`interlingua evaluate` stores the languages of its split alone)."""
        if self.store is None:
            return None
        columns = set(self.store.columns)
        return [lang for lang in self.store.languages if {"key", f"{lang}_text"} <= columns]

    def translation(self):
        """The model's SentenceTranslator (orchestration/embedding/translator.py), sharing the embedder's model;
        made once, by the first request that translates."""
        if self.translator is None:
            from orchestration.embedding.translator import SentenceTranslator

            self.translator = SentenceTranslator.beside(self.embedder, self.folder)
        return self.translator

    def release(self) -> None:
        """Drop what the model holds on disk (its download); it is no longer served."""
        if self.download is not None:
            self.download.cleanup()
            self.download = None


class ModelSource:
    """Where the served model comes from: the champion alias of `registry.model_name` (followed), or a
    fixed model directory (`serve.model`)."""

    def __init__(self, config: Config, scratch: str | None = None) -> None:
        self.config = config
        self.scratch = scratch  # where champions are downloaded (None: the temp folder)
        self.follows = config.serve.model == "champion"
        tracker = Tracker.of(config)  # the registry followed
        self.uri, self.name = tracker.uri, tracker.model_name

    def current_version(self) -> str:
        """The version to serve now; NoChampion when the alias is on no version."""
        if not self.follows:
            try:
                folder = model_files.fetch(model_files.check(self.config.serve.model))
            except model_files.ModelMissing as exc:
                raise model_files.ModelMissing(f"serve.model: {exc}") from None
            return file_sha256(folder / model_files.MODEL_FILE)[:12]
        return champion_version(self.config, key="serve.model")

    def load(self, version: str) -> ServedModel:
        """The model of `version`, loaded (a champion's directory downloaded to a folder of its own)."""
        download = None
        if self.follows:
            download = tempfile.TemporaryDirectory(prefix=f"interlingua-serve-v{version}-", dir=self.scratch)
            chosen = choose_model(self.config, "champion", download.name, key="serve.model", version=version)
            folder = model_files.fetch(chosen.location)  # the download: a local folder, itself
        else:
            folder = model_files.fetch(self.config.serve.model)  # a URI: a verified local copy
        try:
            embedder = SentenceEmbedder.load(folder, backend=self.config.runtime.backend)
        except BaseException:
            if download is not None:
                download.cleanup()
            raise
        served = ServedModel(version, embedder, folder, _store(self.config, folder), download)
        served.idle.set()
        return served


def _store(config: Config, folder: Path):
    """The evaluation's stored embeddings when this very model made them (nearest sentences), else None.
    Looked for before importing the search (faiss), which plain embedding does without."""
    if not Location.of(config.eval_dir).join(config.evaluate.split, "embeddings", "manifest.json").exists():
        return None
    from orchestration.embed.search import stored_embeddings

    try:
        return stored_embeddings(config, folder)
    except (OSError, UserError) as exc:  # no nearest sentences, but the embeddings still serve
        log.warning("no nearest sentences: %s", exc)
        return None


class ModelSlot:
    """The model requests get now; `swap` replaces it without failing a request. Used from one event loop:
    `use` and `swap` run on it, so the counts need no lock (the embedding itself may run in threads)."""

    def __init__(self, served: ServedModel, *, drain_timeout_s: float = 60.0) -> None:
        self.current, self.drain_timeout_s = served, drain_timeout_s

    @contextlib.contextmanager
    def use(self) -> Iterator[ServedModel]:
        """The current model, held until the block ends (a swap meanwhile waits for it before dropping it)."""
        served = self.current
        served.in_flight += 1
        served.idle.clear()
        try:
            yield served
        finally:
            served.in_flight -= 1
            if served.in_flight == 0:
                served.idle.set()

    async def swap(self, new: ServedModel, *, loaded_s: float = 0.0) -> None:
        """Serve `new` from now on; drop the old model once its requests finished (or after the timeout)."""
        old, self.current = self.current, new
        started, waiting = time.monotonic(), old.in_flight
        try:
            await asyncio.wait_for(old.idle.wait(), self.drain_timeout_s)
            left = 0
        except TimeoutError:
            left = old.in_flight
        old.release()
        log.info(
            "serving model version %s (was %s): loaded in %.1f s; the old one drained %d request(s) in %.1f s%s",
            new.version,
            old.version,
            loaded_s,
            waiting,
            time.monotonic() - started,
            f", {left} still running after serve.drain_timeout_s" if left else "",
        )
