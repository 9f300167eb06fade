"""The output of `interlingua mine`: Parquet pairs, a manifest, a report figure, an MLflow run.

    <output>/pairs-<x>-<y>.parquet   <x>_text, <y>_text, score, fwd_rank, bwd_rank (best first)
    <output>/manifest.json           written last: inputs, model, per pair counts, drops by reason,
                                     threshold, P/R/F1 on gold, pairs kept per threshold, files
    <output>/report.png              score histograms with the threshold, calibration curves

The output may be a URI: the files are written in a local scratch folder and uploaded, the manifest last,
while the write journal (`core.ownership.begin_writes`) names them at the URI.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from core import mined, ownership, storage
from core.dataset import file_sha256
from evaluation.mining import Pairs
from orchestration.adapters import tracking
from orchestration.adapters.tracker import Tracker
from orchestration.config import Config

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
    out_dir: str | Path,
    results: list[LanguagePair],
    sentences: dict,
    model: dict,
    parent_run_id: str | None,
) -> str:
    """Write the pair files, the figure and the manifest (last) to `out_dir` (a local folder or a URI);
    log the MLflow run; return its id."""
    check_output(out_dir)
    names = [f"pairs-{r.name}.parquet" for r in results] + [REPORT]
    ownership.begin_writes(out_dir, [MANIFEST, *names])
    if storage.exists(storage.join(out_dir, MANIFEST)):  # an unfinished output is never taken for a finished one
        storage.delete_file(storage.join(out_dir, MANIFEST))
    with tempfile.TemporaryDirectory(prefix="interlingua-mined-") as scratch:
        work = Path(scratch) if storage.is_uri(out_dir) else Path(out_dir)  # pyarrow and matplotlib write files
        work.mkdir(parents=True, exist_ok=True)
        entries = {r.name: _write_pairs(work, r, sentences) for r in results}
        _figure(work / REPORT, results)
        manifest = mined.MinedManifest(
            model=mined.MinedModel(**model),
            inputs={
                lang: mined.InputCounts(read=s.read, distinct=len(s.texts), dropped=s.dropped)
                for lang, s in sentences.items()
            },
            pairs=entries,
            config=config.to_dict(),
        )
        if storage.is_uri(out_dir):
            for name in names:
                storage.write_bytes(storage.join(out_dir, name), (work / name).read_bytes())
        mined.write_manifest(work, manifest)
        if storage.is_uri(out_dir):
            storage.write_bytes(storage.join(out_dir, MANIFEST), (work / MANIFEST).read_bytes())
        ownership.end_writes(out_dir)
        return _log(config, work, results, parent_run_id)


def check_output(out_dir: str | Path) -> list[str]:
    """The entries of `mine.output_dir` (local or a URI) once each is this product's mining output (what its
    manifest names, what a killed run recorded it was writing, the embeddings of the inputs);
    ForeignDataError naming the others, before any work: a user's folder is never written into."""
    from orchestration.embed.folder import own_entries as own_blocks

    listed = ownership.recorded_writes(out_dir) | {ownership.JOURNAL}
    try:
        manifest = mined.read_manifest(out_dir)
    except (OSError, mined.MinedManifestError):
        manifest = None  # none, or not ours: nothing in the folder is taken for ours by it
    if manifest is not None:
        listed |= {MANIFEST, REPORT, *(entry.file for entry in manifest.pairs.values())}
    embeddings = storage.join(out_dir, EMBEDDINGS)
    blocks = {lang: own_blocks(storage.join(embeddings, lang, "blocks")) for lang in storage.subdirectories(embeddings)}

    def ours(entry: str) -> bool:  # embeddings/<lang>/sentences.parquet, embeddings/<lang>/blocks/<block>
        parts = entry.split("/")
        if parts[0] != EMBEDDINGS:
            return entry in listed
        inside = "/".join(parts[3:])
        return (
            len(parts) <= 2
            or parts[2:] in (["sentences.parquet"], ["blocks"])
            or (parts[2] == "blocks" and parts[1] in blocks and blocks[parts[1]](inside))
        )

    return ownership.check_only_ours(
        out_dir, ours, what="mine.output_dir", advice="give mine.output_dir a new or empty directory of its own"
    )


def _write_pairs(out_dir: Path, r: LanguagePair, sentences: dict) -> mined.MinedPair:
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
    pq.write_table(table, path, compression="zstd")
    grid = np.round(np.linspace(1.0, 1.5, 11), 2)
    return mined.MinedPair(
        file=path.name,
        rows=len(table),
        sha256=file_sha256(path),
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
    fig.savefig(path, dpi=100)
    plt.close(fig)


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
    with tracker.run(f"{config.name}-mine", config.to_dict(), stage="mine", parent_run_id=parent_run_id) as run_id:
        tracking.log_metrics(tracker.uri, run_id, metrics, 0)
        for name in (MANIFEST, REPORT):
            tracking.log_artifact(tracker.uri, run_id, out_dir / name)
    return run_id
