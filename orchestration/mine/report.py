"""The output of `interlingua mine`: Parquet pairs, a manifest, a report figure, an MLflow run.

    <output>/pairs-<x>-<y>.parquet   <x>_text, <y>_text, score, fwd_rank, bwd_rank (best first)
    <output>/manifest.json           written last: inputs, model, per pair counts, drops by reason,
                                     threshold, P/R/F1 on gold, pairs kept per threshold, files
    <output>/report.png              score histograms with the threshold, calibration curves

The pairs, the figure and the manifest are written in place (`core.output.OutputFolder.writing`: the names
about to be written recorded first, so that a rerun after a crash knows them for the product's), beside the
embeddings of the inputs (`embeddings/`, the corpus job's output, kept for a rerun to resume from), the previous
manifest removed first and the new one written last. In a store (a URI) they are written in a local scratch
folder and copied up, the manifest last.
"""

from __future__ import annotations

import hashlib
import io
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from core import mined
from core.location import Location, Where
from core.output import OutputFolder
from evaluation.mining import Pairs
from orchestration.adapters.tracker import Tracker
from orchestration.config import Config
from orchestration.mine.inputs import Sentences

MANIFEST = mined.MANIFEST
REPORT = "report.png"
EMBEDDINGS = "embeddings"  # <lang>/sentences.parquet and <lang>/blocks/: the corpus embedding job's output


@dataclass
class LanguagePair:
    """What mining one pair of languages gave."""

    src: str
    trg: str
    index: str  # flat or ivfpq
    candidates: int
    kept: Pairs  # above the threshold, best first
    filtered_scores: np.ndarray  # scores of the pairs that passed the filters, for the histogram
    threshold: float
    dropped: dict[str, int]
    scores: dict[str, float] | None  # precision, recall, f1 on gold
    curve: dict[str, np.ndarray] | None  # the calibration curve

    @property
    def name(self) -> str:
        return f"{self.src}-{self.trg}"


def write_outputs(
    config: Config,
    out_dir: Location,
    results: list[LanguagePair],
    sentences: dict[str, Sentences],
    model: mined.MinedModel,
    parent_run_id: str | None,
) -> str:
    """Write the pair files, the figure and the manifest (last) to `out_dir` (a local folder or a URI);
    log the MLflow run; return its id. ForeignDataError, before anything is written, when the folder holds
    what `mine` did not write."""
    out = output_folder(out_dir)
    out.check_replaceable()
    names = [f"pairs-{r.name}.parquet" for r in results] + [REPORT]
    local = out.location.local_path
    with tempfile.TemporaryDirectory(prefix="interlingua-mined-") as scratch:
        work = local or Path(scratch)  # pyarrow and matplotlib write local files: a scratch folder for a store
        with out.writing(names):
            work.mkdir(parents=True, exist_ok=True)
            entries = {r.name: _write_pairs(work, r, sentences) for r in results}
            _figure(work / REPORT, results)
            manifest = mined.MinedManifest(
                model=model,
                inputs={
                    lang: mined.InputCounts(read=s.read, distinct=len(s.texts), dropped=s.dropped)
                    for lang, s in sentences.items()
                },
                pairs=entries,
                config=config.to_dict(),
            )
            data = mined.manifest_bytes(manifest)
            out.commit_in_place(data, files_from=None if local else work)
        if local is None:  # the run logs the manifest beside the figure, from the scratch folder
            (work / MANIFEST).write_bytes(data)
        return _log(config, work, results, parent_run_id)


class MinedKind:
    """`mine`'s output as an output kind (`core.output.Kind`): what its manifest names (the pair files, the
    figure), and the embeddings of the inputs (`embeddings/<lang>/`:
    sentences.parquet, and embed's output in `blocks/`, `orchestration.embed.folder.EmbedKind`)."""

    what = "mine.output_dir"
    marker = MANIFEST
    advice = "give mine.output_dir a new or empty directory of its own"

    def ours(self, folder: Location) -> Callable[[str], bool]:
        from orchestration.embed.folder import EmbedKind

        listed: set[str] = set()  # what a killed run recorded it was writing: `OutputFolder`'s own check adds it
        try:
            manifest = mined.read_manifest(folder)
        except (OSError, mined.MinedManifestError):
            manifest = None  # none, or not ours: nothing in the folder is taken for ours by it
        if manifest is not None:  # a finished output names its pair files and the sides it embedded
            listed |= {MANIFEST, REPORT, *(entry.file for entry in manifest.pairs.values())}
            listed |= {f"{EMBEDDINGS}/{lang}/sentences.parquet" for lang in manifest.inputs}
        embeddings = folder / EMBEDDINGS
        blocks = {lang: EmbedKind().ours(embeddings / lang / "blocks") for lang in embeddings.subdirectories()}

        def ours(entry: str) -> bool:  # embeddings/<lang>/sentences.parquet, embeddings/<lang>/blocks/<block>
            parts = entry.split("/")
            if parts[0] != EMBEDDINGS or entry in listed:
                return entry in listed
            inside = "/".join(parts[3:])
            return (
                len(parts) <= 2
                or parts[2:] == ["blocks"]
                or (parts[2:] == ["sentences.parquet"] and _embedded(embeddings / parts[1]))
                or (parts[2] == "blocks" and parts[1] in blocks and blocks[parts[1]](inside))
            )

        return ours


def _embedded(side: Location) -> bool:
    """Whether `side/sentences.parquet` is the input that the manifest of the blocks beside it names (by its
    path and size): mine wrote it. A file of that name that no record names is a user's."""
    from pydantic import ValidationError

    from orchestration.embed.folder import EmbedMeta, read_own_manifest

    current = read_own_manifest(side / "blocks").current
    try:
        meta = None if current is None else EmbedMeta.model_validate(current.meta)
    except ValidationError:
        return False
    sentences = side / "sentences.parquet"
    return meta is not None and any(
        Location.of(i.path).identity == sentences.identity and i.bytes == sentences.size() for i in meta.inputs
    )


def output_folder(out_dir: Where) -> OutputFolder:
    """`mine.output_dir` as an `OutputFolder` (`MinedKind`): `check_replaceable()` is its entries once each is
    `mine`'s, ForeignDataError naming the others, before any work: a user's folder is never written into."""
    return OutputFolder(out_dir, MinedKind())


def _write_pairs(out_dir: Path, r: LanguagePair, sentences: dict[str, Sentences]) -> mined.MinedPair:
    src, trg = sentences[r.src].raw, sentences[r.trg].raw
    table = pa.table(
        {
            f"{r.src}_text": pa.array([src[i] for i in r.kept.src], pa.string()),
            f"{r.trg}_text": pa.array([trg[i] for i in r.kept.trg], pa.string()),
            "score": pa.array(r.kept.score, pa.float32()),
            "fwd_rank": pa.array(r.kept.fwd_rank, pa.int16()),
            "bwd_rank": pa.array(r.kept.bwd_rank, pa.int16()),
        }
    )
    path = out_dir / f"pairs-{r.name}.parquet"
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    data = sink.getvalue().to_pybytes()
    Location.of(path).write_bytes(data)  # a new file renamed into place: a hard-linked snapshot keeps the old one
    grid = np.round(np.linspace(1.0, 1.5, 11), 2)
    return mined.MinedPair(
        file=path.name,
        rows=len(table),
        sha256=hashlib.sha256(data).hexdigest(),
        languages=[r.src, r.trg],
        index=r.index,
        candidates=r.candidates,
        threshold=r.threshold,
        dropped=r.dropped,
        gold=r.scores,
        kept_per_threshold={f"{t:.2f}": int((r.filtered_scores >= t).sum()) for t in grid},
    )


def _figure(path: Path, results: list[LanguagePair]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(10, 3.2 * len(results)), squeeze=False)
    for (hist, cal), r in zip(axes, results):
        hist.hist(r.filtered_scores, bins=60, color="tab:blue")
        hist.axvline(r.threshold, color="tab:red", label=f"threshold {r.threshold:.3f}")
        hist.set_title(f"{r.name}: margin scores of {len(r.filtered_scores)} candidates")
        hist.legend(fontsize=8)
        if r.curve is not None:
            for key in ("precision", "recall", "f1"):
                cal.plot(r.curve["threshold"], r.curve[key], label=key)
            cal.axvline(r.threshold, color="tab:red")
            cal.set_xlabel("threshold")
            cal.legend(fontsize=8)
        cal.set_title("calibration on gold pairs" if r.curve is not None else "fixed threshold (no gold)")
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=100)
    plt.close(fig)
    Location.of(path).write_bytes(image.getvalue())


def _log(config: Config, out_dir: Path, results: list[LanguagePair], parent_run_id: str | None) -> str:
    tracker = Tracker.of(config)
    metrics: dict[str, float] = {}
    for r in results:
        prefix = f"mine/{r.name}"
        metrics.update(
            {f"{prefix}/candidates": r.candidates, f"{prefix}/kept": len(r.kept), f"{prefix}/threshold": r.threshold}
        )
        metrics.update({f"{prefix}/dropped/{reason}": n for reason, n in r.dropped.items()})
        metrics.update({f"{prefix}/{k}": v for k, v in (r.scores or {}).items()})
    with tracker.run(f"{config.name}-mine", config.to_dict(), stage="mine", parent_run_id=parent_run_id) as run:
        run.log_metrics(metrics, 0)
        for name in (MANIFEST, REPORT):
            run.log_artifact(out_dir / name)
    return run.id
