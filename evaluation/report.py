"""An evaluation's results as people and tools read them: a text matrix, CSV, JSON and a heatmap.

    with output(out_dir).writing(list(FILES)):  # until the state file, written last in the block, names them
        write_report(out_dir, matrix, pairs, averages, languages, sentences)
        ...
    print(format_matrix(matrix, averages, languages))

Errors are fractions in the data and percent in what people read; rows are the
query language, columns the searched one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import NotRequired, TypedDict

import numpy as np

from core import boundary, ownership
from core.location import Location, Where
from core.output import OutputFolder

Matrix = dict[tuple[str, str], float]
FILES = ("error_matrix.csv", "error_matrix.png", "metrics.json")
STATE_FILE = "state.json"  # the evaluation's stage state (`orchestration.evaluate.EvaluationRecord`), written last


def format_matrix(matrix: Matrix, averages: dict[str, float], languages: list[str]) -> str:
    """The error matrix in percent (rows: query language, columns: searched language) and averages."""
    lines = ["error %  " + "".join(f"{q:>7}" for q in languages)]
    for p in languages:
        cells = "".join(f"{'-':>7}" if p == q else f"{100 * matrix[(p, q)]:>7.2f}" for q in languages)
        lines.append(f"{p:<9}{cells}")
    lines.append("averages: " + ", ".join(f"{k} {100 * v:.2f}" for k, v in averages.items()))
    return "\n".join(lines)


def grid(matrix: Matrix, languages: list[str]) -> np.ndarray:
    """(L, L) array of the matrix, NaN on the diagonal and for missing pairs."""
    out = np.full((len(languages), len(languages)), np.nan)
    for (p, q), err in matrix.items():
        out[languages.index(p), languages.index(q)] = err
    return out


EMBEDDINGS, SEARCH = "embeddings", "search"  # the stored embeddings (their own kind), each pair's top-k
STAGED = f".{EMBEDDINGS}.partial"  # the stored embeddings' staging folder (`store_writer.output`)
# the folders of stored embeddings: the model's, and the old model's of a compatible one
# (`orchestration.evaluate.compatibility`)
COMPATIBLE_EMBEDDINGS = "embeddings-compatible"
STORES = (EMBEDDINGS, COMPATIBLE_EMBEDDINGS)
SEARCH_FILES = ("scores.npy", "ids.npy", "better.npy")  # search/<p>-<q>/: `evaluation.xsim`'s files of a pair


class MetricsRecord(TypedDict):
    """metrics.json: the tuples searched, the averages and every pair's metrics ("en-fr": {"error": ...}); with
    `evaluate.translation_rows`, each pair's translation scores ("en-fr": {"bleu": ..., "chrf": ...}); with
    `evaluate.transfer`, each task's accuracies ("bible_books": {"accuracy": {"en-fr": ...}, "averages": ...});
    for a model trained with `train.compatible_with`, its queries among the old model's vectors ("cross_version")."""

    sentences: int
    averages: dict[str, float]
    pairs: dict[str, dict[str, float]]
    translation: NotRequired[dict[str, dict[str, float]]]
    transfer: NotRequired[dict[str, dict]]
    cross_version: NotRequired[dict]


class ReportKind:
    """An evaluation's folder as an output kind (`core.output.Kind`), committed by its state file (`STATE_FILE`,
    written last: a JSON object with the evaluation's fingerprint).

    Its own, by record only: the state file (or the write journal of `OutputFolder.writing`) vouches for `FILES`
    and itself; metrics.json's pairs for `search/<p>-<q>/` and its `SEARCH_FILES`; the stored embeddings'
    manifest for what lies under `embeddings/` and `embeddings-compatible/` (`evaluation.store_writer.StoreKind`).
    A user's file anywhere
    else, in those folders too, is a user's."""

    what = "evaluation folder"
    marker = STATE_FILE
    advice = "move those files out of it; interlingua writes only its own evaluation there"

    def ours(self, folder: Location) -> Callable[[str], bool]:
        from evaluation.store_writer import StoreKind

        vouched = ownership.is_stage_state(folder / STATE_FILE) or set(FILES) <= ownership.recorded_writes(folder)
        names = {*FILES, STATE_FILE} if vouched else set()
        if vouched:
            names |= ownership.with_parents(
                f"{SEARCH}/{pair}/{name}" for pair in _pairs(folder / "metrics.json") for name in SEARCH_FILES
            )
        stores = {name: StoreKind().ours(folder / name) for name in STORES}
        # a killed run's embeddings, marked: removed whole
        staged = {f".{name}.partial": ownership.is_staging(folder / f".{name}.partial") for name in STORES}

        def ours(entry: str) -> bool:
            top, _, rest = entry.partition("/")
            if top in stores and rest:
                return stores[top](rest)
            if top in staged:
                return staged[top]
            return entry in names or entry in stores

        return ours


def _pairs(metrics: Location) -> list[str]:
    """The pair names ("<p>-<q>") a report's metrics.json lists; none when it is missing or not a report's."""
    try:
        pairs = json.loads(metrics.read_bytes())["pairs"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [p for p in pairs if _is_segment(p)] if isinstance(pairs, dict) else []


def _is_segment(name: object) -> bool:
    """Whether `name` is one path segment inside its folder (`core.boundary.check_segment`)."""
    if not isinstance(name, str):
        return False
    try:
        boundary.check_segment(name)
    except boundary.BoundaryError:
        return False
    return True


def output(out_dir: Where) -> OutputFolder:
    """The evaluation folder `out_dir` as an output (`core.output`): `check_replaceable()` before the
    evaluation overwrites anything (ForeignDataError naming what is not the product's), `writing(FILES)`
    around the report until the state file names it."""
    return OutputFolder(out_dir, ReportKind())


def write_report(
    out_dir: Path,
    matrix: Matrix,
    pairs: dict[str, dict[str, float]],
    averages: dict[str, float],
    languages: list[str],
    sentences: int,
    translation: dict[str, dict[str, float]] | None = None,
    transfer: dict[str, dict] | None = None,
    cross_version: dict | None = None,
) -> MetricsRecord:
    """Write `FILES` into `out_dir` (inside `output(out_dir).writing(list(FILES))`, which records them first
    as the product's, until the state file names them); returns the metrics.json record."""
    values = grid(matrix, languages)
    lines = ["source\\target," + ",".join(languages)]
    lines += [f"{p}," + ",".join("" if np.isnan(v) else f"{v:.4f}" for v in row) for p, row in zip(languages, values)]
    (out_dir / "error_matrix.csv").write_text("\n".join(lines) + "\n")
    record = MetricsRecord(sentences=sentences, averages=averages, pairs=pairs)
    if translation:
        record["translation"] = translation
    if transfer:
        record["transfer"] = transfer
    if cross_version:
        record["cross_version"] = cross_version
    (out_dir / "metrics.json").write_text(json.dumps(record, indent=2))
    _heatmap(out_dir / "error_matrix.png", values, languages, sentences)
    return record


def _heatmap(path: Path, values: np.ndarray, languages: list[str], sentences: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.0 + 0.8 * len(languages), 0.8 + 0.8 * len(languages)))
    image = ax.imshow(100 * values, cmap="viridis_r", vmin=0, vmax=100)
    ax.set_xticks(range(len(languages)), languages)
    ax.set_yticks(range(len(languages)), languages)
    ax.set_xlabel("target (searched)")
    ax.set_ylabel("source (query)")
    for i in range(len(languages)):
        for j in range(len(languages)):
            if not np.isnan(values[i, j]):
                ax.text(j, i, f"{100 * values[i, j]:.1f}", ha="center", va="center", color="w", fontsize=8)
    ax.set_title(f"similarity-search error % ({sentences} sentences)")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
