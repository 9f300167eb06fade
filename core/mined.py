"""The manifest of `interlingua mine`'s output, the format that `mine` writes (`orchestration.mine.report`)
and a `kind: mined` source reads (`pipelines.source_files.plan_mined`): one model for both, here in the core
because the pipeline may not import the orchestration.

    <output>/manifest.json   written last: the model, what each language's input gave, each mined pair's file
                             (rows, sha256, languages), its search, threshold, drops by reason, P/R/F1 on gold,
                             the pairs it would keep at each threshold, and the resolved config
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from core import storage
from core.boundary import Name, Segment, check_no_links
from core.schema import wrong_fields

FORMAT: Final = "interlingua-mined/1"
MANIFEST = "manifest.json"


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MinedModel(_Record):
    model: str  # the model directory, absolute (or its URI); "use" for the offline USE
    model_sha256: str | None = None  # of its model.safetensors (none for "use")


class InputCounts(_Record):
    read: int  # lines
    distinct: int  # sentences left to mine
    dropped: dict[str, int]  # reason -> lines


class MinedPair(_Record):
    """One pair of languages' mined file, `pairs-<src>-<trg>.parquet`."""

    file: Name
    rows: int
    sha256: str
    languages: list[Segment]  # [src, trg]
    index: str  # flat or ivfpq
    candidates: int
    threshold: float
    dropped: dict[str, int]
    gold: dict[str, float] | None  # precision, recall, f1 against gold pairs, when given
    kept_per_threshold: dict[str, int]


class MinedManifest(_Record):
    format: Literal["interlingua-mined/1"] = FORMAT
    model: MinedModel
    inputs: dict[str, InputCounts]  # lang -> its counts
    pairs: dict[str, MinedPair]  # "<src>-<trg>" -> its file
    config: dict[str, JsonValue]  # the resolved run config: what `mine` was run with, for a rerun


class MinedManifestError(ValueError):
    """A folder whose manifest.json is not `mine`'s."""


def read_manifest(folder: storage.Where) -> MinedManifest:
    """The manifest of the mining output at `folder` (local or a URI). FileNotFoundError when there is none;
    MinedManifestError naming the file and its first wrong field when it is not a mining manifest."""
    path = storage.join(folder, MANIFEST)
    check_no_links(folder, "the mining output")
    try:
        return MinedManifest.model_validate_json(storage.read_bytes(path))
    except ValidationError as exc:
        raise MinedManifestError(f"{path}: not a mining manifest ({wrong_fields(exc)})") from None


def manifest_bytes(manifest: MinedManifest) -> bytes:
    """The manifest's file as `mine` commits it (`OutputFolder.commit_in_place`)."""
    return storage.json_bytes(manifest.model_dump(mode="json"))
