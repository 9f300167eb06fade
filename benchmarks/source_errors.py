"""The test error of each source of a multi-source split, from a run's stored test embeddings: the tuples whose
key starts `<source>:` searched among themselves (as training logs `dev/source_xsim_error/<source>` for dev).

    .venv/bin/python benchmarks/source_errors.py runs/multidomain-cpu/eval/test/embeddings [--sources bible catalogs]

Prints one line per source: its tuples, the error % over every ordered pair of the stored languages, and en-fr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluation.store import StoredEmbeddings  # noqa: E402
from evaluation.xsim import average_error, error_matrix  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("embeddings", help="a stored embeddings folder (<run_dir>/eval/test/embeddings)")
    parser.add_argument("--sources", nargs="+", default=["bible", "catalogs"])
    args = parser.parse_args()
    store = StoredEmbeddings.open(args.embeddings)
    keys = np.asarray(store.column("key")).astype(str)
    languages = store.languages
    for source in args.sources:
        at = np.char.startswith(keys, f"{source}:")
        matrix = error_matrix({lang: store.rows(lang)[at] for lang in languages})
        ef = average_error(matrix, ["en", "fr"]) if {"en", "fr"} <= set(languages) else float("nan")
        print(f"{source}: {int(at.sum())} tuples, error {100 * average_error(matrix):.2f} %, ef {100 * ef:.2f} %")


if __name__ == "__main__":
    main()
