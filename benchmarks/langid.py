"""The `wrong_language` filter on the whole Bible: what it drops from real columns, what it catches
in swapped ones, and what it costs.

For each language of the demo (configs/bible6-cpu.yaml) every verse is normalized as `prepare`
does; those the other filters keep are scored by py3langid (P(column's language | text)).
Reported per threshold: verses the filter would drop from the real column, and, for a column
deliberately filled with another language's verses (French in the Spanish column...), the
share it catches. The time is the scoring alone, one process.

    python benchmarks/langid.py [--thresholds 0.01,0.05,0.1] [--examples 3]
"""

from __future__ import annotations

import argparse
import sqlite3
import time

import numpy as np

from core.normalize import NormalizeConfig, Normalizer
from pipelines.clean import SentenceFilter
from pipelines.config import FilterConfig, LanguageIdConfig
from pipelines.langid import LanguageCheck
from pipelines.source_config import BibleSource
from pipelines.sources import bible_db_path

COLUMNS = {"en": "k", "fr": "l", "es": "v", "ru": "r", "ar": "y", "zh": "c"}
# (text's version, its language, the column it is put in): same-script swaps (other scripts
# are already dropped as wrong_script), two of them between close languages
SWAPS = [
    ("l", "fr", "es"),
    ("v", "es", "fr"),
    ("k", "en", "fr"),
    ("l", "fr", "en"),
    ("a", "pt", "es"),
    ("1", "it", "es"),
]


def verses(db: sqlite3.Connection, version: str) -> list[str]:
    rows = db.execute("SELECT vText FROM bible WHERE bbName = ? ORDER BY bNumber, cNumber, vNumber", (version,))
    return [r[0] for r in rows]


def scores(texts: list[str], column: str, check: LanguageCheck) -> tuple[np.ndarray, list[str], float]:
    """P(column | text) of the verses the other filters keep (normalized as `prepare` does)."""
    normalize, keep = Normalizer(NormalizeConfig()), SentenceFilter(FilterConfig())
    kept = [t for t in (normalize(raw, column)[0] for raw in texts) if keep.reason(t, column) is None]
    started = time.perf_counter()
    p = np.array([check.probability(t, column) for t in kept])
    return p, kept, time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--thresholds", default="0.01,0.05,0.1")
    ap.add_argument("--examples", type=int, default=3, help="dropped real verses shown per language")
    args = ap.parse_args()
    thresholds = [float(t) for t in args.thresholds.split(",")]
    db = sqlite3.connect(f"file:{bible_db_path(BibleSource(kind='bible'))}?mode=ro", uri=True)
    check = LanguageCheck(LanguageIdConfig(enabled=True))
    heads = " | ".join(f"< {t:g}" for t in thresholds)
    print(f"| real column | verses scored | {heads} | sentences/s |")
    print("|---|---:|" + "---:|" * len(thresholds) + "---:|")
    worst: dict[str, list[tuple[float, str]]] = {}
    for lang, version in COLUMNS.items():
        p, kept, seconds = scores(verses(db, version), lang, check)
        counts = " | ".join(f"{int((p < t).sum())} ({100 * (p < t).mean():.2f} %)" for t in thresholds)
        print(f"| {lang} | {len(p):,} | {counts} | {len(p) / seconds:,.0f} |")
        order = np.argsort(p)[: args.examples]
        worst[lang] = [(float(p[i]), kept[i][:90]) for i in order]
    print(f"\n| text in column | verses scored | caught {heads.replace('<', 'at <')} |")
    print("|---|---:|" + "---:|" * len(thresholds))
    for version, source, column in SWAPS:
        p, _, _ = scores(verses(db, version), column, check)
        caught = " | ".join(f"{100 * (p < t).mean():.2f} %" for t in thresholds)
        print(f"| {source} in {column} | {len(p):,} | {caught} |")
    print("\nlowest-scored real verses:")
    for lang, rows in worst.items():
        for prob, text in rows:
            print(f"  {lang} {prob:.4f} {text}")


if __name__ == "__main__":
    main()
