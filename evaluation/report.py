"""An evaluation's results as people and tools read them: a text matrix, CSV, JSON and a heatmap.

    write_report(out_dir, matrix, pairs, averages, languages, sentences)
    print(format_matrix(matrix, averages, languages))

Errors are fractions in the data and percent in what people read; rows are the
query language, columns the searched one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from core import ownership

Matrix = dict[tuple[str, str], float]
FILES = ("error_matrix.csv", "error_matrix.png", "metrics.json")


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


SUBFOLDERS = ("embeddings", ".embeddings.partial", "search")  # the stored embeddings, their staging, the top-k


def check_output(out_dir: Path, *, record: str) -> list[str]:
    """The entries of an evaluation folder once each is this product's, else ForeignDataError naming the
    others, before the evaluation overwrites any.

    Its own by record: `record` (the state file, written last: a JSON object with the evaluation's
    fingerprint) or the write journal (`core.ownership.begin_writes`, written before the report) vouches for
    `FILES`; without either, a file of those names is a user's. By layout: what lies in `SUBFOLDERS`."""
    vouched = ownership.is_stage_state(out_dir / record) or set(FILES) <= ownership.recorded_writes(out_dir)
    names = {*FILES, record} if vouched else set()
    return ownership.check_only_ours(
        out_dir,
        lambda e: e in names or e == ownership.JOURNAL or e.split("/")[0] in SUBFOLDERS,
        what="evaluation folder",
        advice="move those files out of it; interlingua writes only its own evaluation there",
    )


def write_report(
    out_dir: Path,
    matrix: Matrix,
    pairs: dict[str, dict[str, float]],
    averages: dict[str, float],
    languages: list[str],
    sentences: int,
) -> dict[str, Any]:
    """Write `FILES` into `out_dir`, recorded first as the product's (`ownership.begin_writes`: the caller
    ends the record once its state file names them); returns the metrics.json record."""
    ownership.begin_writes(out_dir, list(FILES))
    values = grid(matrix, languages)
    lines = ["source\\target," + ",".join(languages)]
    lines += [f"{p}," + ",".join("" if np.isnan(v) else f"{v:.4f}" for v in row) for p, row in zip(languages, values)]
    (out_dir / "error_matrix.csv").write_text("\n".join(lines) + "\n")
    record = {"sentences": sentences, "averages": averages, "pairs": pairs}
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
