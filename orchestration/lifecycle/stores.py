"""The embed outputs `interlingua run` keeps in the champion's space (`registry.stores`).

    kept = keep_stores(config, trained_model_dir)   # after the champion decision: the stores embedded again

A store is in the champion's space when its manifest names the champion's model (its model.safetensors sha256)
or the model the registry tagged the champion compatible with (`interlingua.compatible_with`, the champion
gate's tag for a `train.compatible_with` retrain). Any other store is stale: a warning names it and the model
that embedded it, and the champion embeds it again through `embed`'s corpus job, which resumes a killed run
from the blocks it wrote (in a store, the stale embeddings are removed first and the new blocks written in
place; in a local folder, the new output is staged beside the old one and swapped in whole). A store not
written yet is embedded too. The stores' inputs are never written.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from pydantic import ValidationError

from core.location import Location
from orchestration.adapters import registry
from orchestration.adapters.tracker import Tracker
from orchestration.config import Config
from orchestration.config.stages import StoreSpec

log = logging.getLogger(__name__)


def champion_space(uri: str, name: str, champion) -> set[str]:
    """The model sha256s whose vectors compare with the champion's: its own, and the old model its
    compatibility tag names (a version number, or the old model's sha256 when it was never registered)."""
    from mlflow.exceptions import MlflowException

    from orchestration.lifecycle.champion import MODEL_TAG

    tags = dict(champion.tags)
    space = {tags[MODEL_TAG]} if MODEL_TAG in tags else set()
    old = tags.get(registry.COMPATIBLE_TAG)
    if old and old.startswith("v"):
        try:
            old = registry.version_tags(uri, name, old[1:]).get(MODEL_TAG)
        except MlflowException as exc:  # the old version deleted since: its stores count as stale
            log.warning(
                "%s v%s: compatible with %s, which the registry cannot read (%s)", name, champion.version, old, exc
            )
            old = None
    if old:
        space.add(old)
    return space


def embedded_by(output: str) -> str | None:
    """The model sha256 that `embed`'s manifest at `output` names; None when there is none (not written yet, a
    killed run's, or an output of an earlier layout)."""
    from orchestration.embed.folder import EmbedMeta, read_own_manifest

    manifest = read_own_manifest(output).current
    if manifest is None:
        return None
    try:
        return EmbedMeta.model_validate(manifest.meta).model.model_sha256
    except ValidationError:
        return None


def check_stores(config: Config) -> None:
    """Before any long work (a store refused after the champion decision would fail every run): each store's
    inputs match files, its output's store answers, holds only `embed`'s own files (ForeignDataError naming a
    user's) and is apart from its inputs (OverlapError); CorpusError (exit 2) naming the store otherwise."""
    from core.output import OutputFolder
    from orchestration.embed.folder import EmbedKind
    from orchestration.embedding.inputs import CorpusError, resolve_inputs

    class StoreKind(EmbedKind):  # embed's output, named and advised as a store of the config
        advice = "move them away, or give the store an output of its own"

        def __init__(self, what: str) -> None:
            super().__init__()
            self.what = what

    for i, spec in enumerate(config.registry.stores):
        what = f"registry.stores[{i}] ({spec.lang})"
        try:
            resolve_inputs(spec.inputs, what=f"{what}.inputs")
        except CorpusError as exc:
            raise CorpusError(f"{what}.inputs: {exc}; give files that exist (the store's sentences)") from None
        Location.of(spec.output, f"{what}.output").check_reachable(f"{what}.output")
        output = OutputFolder(spec.output, StoreKind(f"{what}.output"))
        output.check_apart([(given, f"{what}.inputs") for given in spec.inputs])
        output.check_replaceable()


def keep_stores(config: Config, trained_model_dir: str | Path) -> list[str]:
    """Embed again, by the champion, every store of `registry.stores` that is not in its space; the outputs
    embedded. `trained_model_dir`: this run's model, used when it is the champion (else the champion's is
    downloaded). Nothing to do without stores or a champion."""
    stores = config.registry.stores
    tracker = Tracker.of(config)
    champion = registry.champion(tracker.uri, tracker.model_name) if stores else None
    if champion is None:
        return []
    space = champion_space(tracker.uri, tracker.model_name, champion)
    stale = [(spec, embedded_by(spec.output)) for spec in stores]
    stale = [(spec, by) for spec, by in stale if by not in space]
    said = f"{tracker.model_name} v{champion.version}"
    for spec, by in stale:
        if by is None and Location.of(spec.output).join("manifest.json").exists():
            log.warning(
                "store %s (%s): its manifest records no model (an `embed` output of an earlier version): "
                "embedding it again with %s, which records its space",
                spec.output,
                spec.lang,
                said,
            )
        elif by is None:
            log.info("store %s (%s): not embedded yet; embedding it with %s", spec.output, spec.lang, said)
        else:
            log.warning(
                "store %s (%s): embedded by model %s, not in the space of %s: stale until it is embedded again, now",
                spec.output,
                spec.lang,
                by[:12],
                said,
            )
    if not stale:
        return []
    from orchestration.adapters import model_dir as model_files
    from orchestration.lifecycle.champion import MODEL_TAG

    with tempfile.TemporaryDirectory(prefix="interlingua-stores-") as tmp:
        model_dir: str | Path = trained_model_dir
        if Location.of(trained_model_dir).join(model_files.MODEL_FILE).sha256() != champion.tags.get(MODEL_TAG):
            model_dir = registry.download_model_dir(tracker.uri, tracker.model_name, champion.version, tmp)
        for spec, _ in stale:
            _embed(config, spec, model_dir, said)
    return [spec.output for spec, _ in stale]


def _embed(config: Config, spec: StoreSpec, model_dir: str | Path, said: str) -> None:
    from orchestration.embed.corpus import embed_corpus

    runtime = config.runtime
    result = embed_corpus(
        spec.inputs,
        spec.output,
        lang=spec.lang,
        model_dir=model_dir,
        config=config.to_dict(),
        column=spec.column,
        dtype=spec.dtype,
        block_rows=spec.block_rows,
        actors=runtime.embed_actors,
        cpus_per_actor=runtime.cpus_per_task,
        use_gpu=runtime.use_gpu,
        max_tokens=config.evaluate.max_tokens,
        force=True,
        ray_address=runtime.ray_address,
        backend=runtime.backend,
        dashboard=runtime.ray_dashboard,
        worker_niceness=runtime.worker_niceness,
    )
    log.info(
        "store %s (%s): %d sentences embedded by %s in %d blocks (%d now)",
        spec.output,
        spec.lang,
        result.rows,
        said,
        result.blocks,
        result.computed,
    )
