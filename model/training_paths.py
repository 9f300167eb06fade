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

from dataclasses import dataclass
from typing import Literal, Sequence

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


def sample_signature(
    path: TrainingPath, available: Sequence[str], rng: np.random.Generator, *, monolingual: bool = False
) -> Signature | None:
    """One concrete (sources, targets) for a tuple holding `available` languages, or None."""
    sources = [
        lang for lang in available
        if (path.sources is None or lang in path.sources)
        # restricted targets (e.g. a fixed "en") are outputs only, unless auto-encoding
        and (monolingual or path.targets is None or lang not in path.targets)
    ]
    if len(sources) < path.num_sources:
        return None
    chosen = sorted(rng.choice(sources, size=path.num_sources, replace=False).tolist())
    targets = [
        lang for lang in available
        if (path.targets is None or lang in path.targets) and (monolingual or lang not in chosen)
    ]
    if not targets:
        return None
    if path.kind.endswith(":1"):
        targets = [targets[int(rng.integers(len(targets)))]]
    return tuple(chosen), tuple(sorted(targets))


def sample_path(
    paths: Sequence[TrainingPath], available: Sequence[str], rng: np.random.Generator, *, monolingual: bool = False
) -> Signature | None:
    """Pick a path by weight among those the tuple can serve, then its signature."""
    weights = np.array([p.weight for p in paths], dtype=np.float64)
    order = list(range(len(paths)))
    while order:
        probs = weights[order] / weights[order].sum()
        pick = order[int(rng.choice(len(order), p=probs))]
        signature = sample_signature(paths[pick], available, rng, monolingual=monolingual)
        if signature is not None:
            return signature
        order.remove(pick)
    return None
