"""The model `interlingua serve` answers with, and the champion hot-swap. No Ray here: the deployment
(serve/app.py) holds one `ModelSlot` per replica.

    source = ModelSource(config)                      # serve.model: "champion" or a model directory
    slot = ModelSlot(source.load(source.current_version()))
    with slot.use() as served:                        # a request (or a batch) holds the model it started on
        served.embedder.embed(sentences, lang)
    await slot.swap(source.load(new_version))         # later: switch, then drain the old one
    await poll_champion(source, slot, "compatible", warned)   # what the replica's poller does each period

A new champion is swapped in only when the registry tagged it compatible with the served version
(`interlingua.compatible_with: vN`, written by the champion gate for a `train.compatible_with` retrain), unless
`serve.swap=any`: the vectors clients stored with the served version keep comparing with the answers. Every
answer names the model (`model_sha256`) and the models whose stored vectors its own compare with
(`compatible_with`), so a client can tell whether what it stored still fits.

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
    model_sha256: str = ""  # of its model.safetensors: its identity, as embed's manifest records it
    # the model sha256s whose stored vectors its own compare with: the old model of a `train.compatible_with`
    # retrain, once the registry tagged the version compatible with it
    compatible_with: tuple[str, ...] = ()
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

    @property
    def identity(self) -> dict[str, Any]:
        """What every answer says of the model that made it."""
        return {
            "model_version": self.version,
            "model_sha256": self.model_sha256,
            "compatible_with": list(self.compatible_with),
        }

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

    def compatibility(self, version: str) -> str | None:
        """The registry's `interlingua.compatible_with` tag of a champion's `version` (vN, or the old model's
        sha256 when it was never registered), None when untagged or for a model directory."""
        if not self.follows:
            return None
        from orchestration.adapters import registry

        return registry.version_tags(self.uri, self.name, version).get(registry.COMPATIBLE_TAG)

    def load(self, version: str) -> ServedModel:
        """The model of `version`, loaded (a champion's directory downloaded to a folder of its own)."""
        download = None
        if self.follows:
            download = tempfile.TemporaryDirectory(prefix=f"interlingua-serve-v{version}-", dir=self.scratch)
            chosen = choose_model(self.config, "champion", download.name, key="serve.model", version=version)
            folder = model_files.fetch(chosen.location)  # the download: a local folder, itself
        else:
            folder = model_files.fetch(self.config.serve.model)  # a URI: a verified local copy
        try:  # everything read after the download: a failure leaves no download behind (the next poll retries)
            embedder = SentenceEmbedder.load(folder, backend=self.config.runtime.backend)
            compatible: tuple[str, ...] = ()
            if self.follows and self.compatibility(version):  # certified by the champion gate
                old = model_files.lineage(folder).get("compatible_with_sha256")
                compatible = (old,) if old else ()
            served = ServedModel(
                version,
                embedder,
                folder,
                _store(self.config, folder),
                download,
                model_sha256=file_sha256(folder / model_files.MODEL_FILE),
                compatible_with=compatible,
            )
        except BaseException:
            if download is not None:
                download.cleanup()
            raise
        served.idle.set()
        return served


def swap_verdict(policy: str, served: ServedModel, version: str, tag: str | None) -> tuple[bool, str]:
    """Whether to swap `version` in for the served model under `serve.swap` (`policy`), and the warning to log
    ("" when it is compatible). Compatible: the registry tagged it compatible with the served version itself
    (its number, or its model sha256 when that was never registered); a version compatible with another one
    is not, since nobody measured it against the served model's vectors."""
    if tag is not None and tag in (f"v{served.version}", served.model_sha256):
        return True, ""
    said = (
        f"champion version {version} is not compatible with the served version {served.version} (its "
        f"{'tag interlingua.compatible_with is ' + tag if tag else 'registry tags name no compatible version'}): "
        f"vectors stored with version {served.version} (model {served.model_sha256[:12]}) do not compare with its own"
    )
    if policy == "any":
        return True, f"{said}; serving it (serve.swap=any): embed the stored vectors again with it"
    return False, f"{said}; still serving version {served.version} (serve.swap=compatible; set serve.swap=any to swap)"


async def poll_champion(source: ModelSource, slot: ModelSlot, policy: str, warned: set[str]) -> None:
    """One poll of the champion alias: a new version that `swap_verdict` admits is loaded beside the served one
    and swapped in; one it refuses stays unserved, its warning logged once (`warned`: the versions said), and
    its tag is read again at the next poll (a tag written after the promotion is seen)."""
    version = await asyncio.to_thread(source.current_version)
    if version == slot.current.version:
        return
    tag = await asyncio.to_thread(source.compatibility, version)
    swap, warning = swap_verdict(policy, slot.current, version, tag)
    if warning and version not in warned:
        warned.add(version)
        log.warning("%s", warning)
    if not swap:
        return
    started = time.monotonic()
    new = await asyncio.to_thread(source.load, version)
    await slot.swap(new, loaded_s=time.monotonic() - started)


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
