"""Training paths (Schwenk & Douze 2017, section 3): which encoders feed which decoders.

  1:1  one source language -> one target language
  1:N  one source -> every other language of the tuple (or of `targets`)
  M:1  M sources, their embeddings averaged -> one target
  M:N  M sources averaged -> every other language

Paths are mixed by sampling each training tuple's path with probability
proportional to `weight` (the paper's Table 3); a mini-batch holds one
signature (source languages, target languages) only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Kind = Literal["1:1", "1:N", "M:1", "M:N"]
Signature = tuple[tuple[str, ...], tuple[str, ...]]  # (sources, targets), each sorted


@dataclass(frozen=True)
class TrainingPath:
    kind: Kind
    weight: float = 1.0
    sources: tuple[str, ...] | None = None  # allowed source languages; any when None
    targets: tuple[str, ...] | None = None  # allowed target languages (e.g. a fixed "en")
    m: int = 2  # number of sources of M:1 and M:N

    @property
    def num_sources(self) -> int:
        return 1 if self.kind.startswith("1:") else self.m


def _candidates(path: TrainingPath, available: Sequence[str], monolingual: bool) -> tuple[list[str], list[str]] | None:
    """The source and target languages `path` may draw from in a tuple holding `available`, each sorted,
    or None when no draw can serve it (too few sources, or no target left once the sources are drawn)."""
    sources = sorted(
        lang
        for lang in available
        if (path.sources is None or lang in path.sources)
        # restricted targets (e.g. a fixed "en") are outputs only, unless auto-encoding
        and (monolingual or path.targets is None or lang not in path.targets)
    )
    targets = sorted(lang for lang in available if path.targets is None or lang in path.targets)
    # the drawn sources leave the targets unless auto-encoding; they are among them only when targets are free
    left = len(targets) - (0 if monolingual or path.targets is not None else path.num_sources)
    if len(sources) < path.num_sources or left < 1:
        return None
    return sources, targets


def sample_signatures(
    paths: Sequence[TrainingPath],
    languages: Sequence[str],
    present: np.ndarray,
    rng: np.random.Generator,
    *,
    monolingual: bool = False,
) -> tuple[list[Signature], np.ndarray]:
    """Each tuple's path and signature, drawn for all tuples at once.

    `present` (tuples x languages, bool) says which of `languages` each tuple holds. A tuple's path is
    drawn by weight among the paths it can serve; its sources are `m` of the path's candidate languages
    drawn without replacement, its targets the candidates left (one of them, drawn, for M:1 and 1:1).
    Returns the distinct signatures drawn and, per tuple, the index of its signature (-1: no path serves
    the tuple). The draws are one per group of tuples holding the same languages, so a window costs a
    few array operations, not a loop over its tuples.
    """
    present = np.asarray(present, dtype=bool)
    if present.shape[1:] != (len(languages),):
        raise ValueError(f"present has shape {present.shape}; expected (tuples, {len(languages)})")
    weights = np.array([p.weight for p in paths], dtype=np.float64)
    index = np.full(len(present), -1, dtype=np.int64)
    signatures: dict[Signature, int] = {}
    patterns, pattern_of = np.unique(present, axis=0, return_inverse=True)
    for p, pattern in enumerate(patterns):
        rows = np.flatnonzero(pattern_of.reshape(-1) == p)
        available = [lang for lang, has in zip(languages, pattern) if has]
        served = [(k, c) for k, c in enumerate(_candidates(path, available, monolingual) for path in paths) if c]
        if not served:
            continue
        chances = weights[[k for k, _ in served]]
        picks = rng.choice(len(served), size=len(rows), p=chances / chances.sum())
        for j, (k, (sources, targets)) in enumerate(served):
            members = rows[picks == j]
            if len(members):
                codes, found = _draw(paths[k], sources, targets, len(members), rng, monolingual)
                for code, signature in found.items():
                    index[members[codes == code]] = signatures.setdefault(signature, len(signatures))
    return list(signatures), index


def _draw(
    path: TrainingPath, sources: list[str], targets: list[str], n: int, rng: np.random.Generator, monolingual: bool
) -> tuple[np.ndarray, dict[int, Signature]]:
    """`n` signatures of one path from its candidates: a code per draw and the signature of each code."""
    # m sources without replacement: the first m of a random order of the candidates (as a mask: name order)
    chosen = np.argsort(rng.random((n, len(sources))), axis=1)[:, : path.num_sources]
    drawn = np.zeros((n, len(sources)), dtype=bool)
    drawn[np.arange(n)[:, None], chosen] = True
    allowed = np.ones((n, len(targets)), dtype=bool)
    if not monolingual:  # a drawn source is no target
        position = {lang: t for t, lang in enumerate(targets)}
        for s, lang in enumerate(sources):
            if lang in position:
                allowed[:, position[lang]] &= ~drawn[:, s]
    if path.kind.endswith(":1"):  # one of the allowed targets, uniformly
        nth = rng.integers(allowed.sum(axis=1))
        pick = (np.cumsum(allowed, axis=1) > nth[:, None]).argmax(axis=1)
        allowed = np.zeros_like(allowed)
        allowed[np.arange(n), pick] = True
    _, first, codes = np.unique(np.hstack([drawn, allowed]), axis=0, return_index=True, return_inverse=True)
    found = {
        code: (
            tuple(lang for lang, keep in zip(sources, drawn[row]) if keep),
            tuple(lang for lang, keep in zip(targets, allowed[row]) if keep),
        )
        for code, row in enumerate(first.tolist())
    }
    return codes.reshape(-1), found
