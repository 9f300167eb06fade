"""The counts a preparation publishes, and the checks on them before anything is published: every record
read is written or dropped under a reason, no language and no split is left empty."""

from __future__ import annotations

from typing import TypedDict

from core import dataset
from pipelines.errors import EmptyDataError

# Tuples, or one language's sentences: read, written per split, dropped per reason (`core.dataset.Tally`)
Block = TypedDict("Block", {"in": int, "out": dict[str, int], "dropped": dict[str, int]})
# One source's tuples: read, written per split (`core.dataset.SourceTally`)
SourceBlock = TypedDict("SourceBlock", {"in": int, "out": dict[str, int]})


class Counts(TypedDict):
    """The counts of a preparation, as `core.dataset.Counts` reads them."""

    tuples: Block
    sentences: dict[str, Block]  # lang -> its sentences
    sources: dict[str, SourceBlock]  # source name -> its tuples
    normalized: dict[str, dict[str, int]]  # lang -> pattern -> sentences changed by it


def count_table(stats: dict[str, int], languages: list[str]) -> Counts:
    """Turn flat stats names into {tuples: {...}, sentences: {lang: {...}}, sources: {name: {in, out}},
    normalized: {...}}."""

    def block(prefix: str) -> Block:
        dropped = {
            name.rsplit("/", 1)[1]: n for name, n in sorted(stats.items()) if name.startswith(f"{prefix}/dropped/")
        }
        return {
            "in": stats.get(f"{prefix}/in", 0),
            "out": {s: stats.get(f"{prefix}/out/{s}", 0) for s in dataset.SPLITS},
            "dropped": dropped,
        }

    normalized: dict[str, dict[str, int]] = {}
    for name, n in sorted(stats.items()):
        if name.startswith("normalized/"):
            _, lang, pattern = name.split("/")
            normalized.setdefault(lang, {})[pattern] = n
    sources = sorted({name.split("/")[1] for name in stats if name.startswith("sources/")})
    return {
        "tuples": block("tuples"),
        "sentences": {lang: block(f"sentences/{lang}") for lang in languages},
        "sources": {
            name: {
                "in": stats.get(f"sources/{name}/in", 0),
                "out": {s: stats.get(f"sources/{name}/out/{s}", 0) for s in dataset.SPLITS},
            }
            for name in sources
        },
        "normalized": normalized,
    }


def check_not_empty(counts: Counts, *, sample: int) -> None:
    """EmptyDataError, with the drop counts by reason, when there was no BPE sample or a language kept no
    sentence: a dataset that would train or measure nothing (or `nan`)."""
    t = counts["tuples"]
    if not sample:
        raise EmptyDataError(
            f"no training sentence to learn the BPE model from: tuples {_tally(t)}; "
            f"sentences dropped {_by_language(counts)}; check prepare.sources, prepare.filters "
            "and prepare.split"
        )
    for lang, s in counts["sentences"].items():
        if s["in"] and not sum(s["out"].values()):
            raise EmptyDataError(
                f"language {lang!r} kept none of its sentences: {_tally(s)}; check the {lang} "
                "input (its script, language code) and prepare.filters"
            )


def check_splits_not_empty(counts: Counts) -> None:
    """EmptyDataError when a split got no tuple (with fractions; sizes are checked by `check_held_out`)."""
    t = counts["tuples"]
    empty = [split for split, n in t["out"].items() if not n]
    if empty:
        raise EmptyDataError(f"split {empty[0]!r} would be empty: tuples {_tally(t)}; check prepare.split")


def _tally(block: Block) -> str:
    """`85 read, written train 0, dev 0, test 0; dropped duplicate 59, ...` (largest first)."""
    return (
        f"{block['in']:,} read, written "
        + ", ".join(f"{s} {n:,}" for s, n in block["out"].items())
        + "; dropped "
        + (_drops(block) or "none")
    )


def _drops(block: Block) -> str:
    return ", ".join(f"{reason} {n:,}" for reason, n in sorted(block["dropped"].items(), key=lambda kv: -kv[1]))


def _by_language(counts: Counts) -> str:
    return "; ".join(f"{lang}: {_drops(s) or 'none'}" for lang, s in counts["sentences"].items())


def check_accounting(counts: Counts) -> None:
    """Raise RuntimeError unless everything read was written or dropped under a reason."""
    blocks = {"tuples": counts["tuples"], **{f"sentences/{k}": v for k, v in counts["sentences"].items()}}
    for name, b in blocks.items():
        accounted = sum(b["out"].values()) + sum(b["dropped"].values())
        if accounted != b["in"]:
            raise RuntimeError(f"{name}: {b['in']} read but {accounted} written or dropped: records lost")
