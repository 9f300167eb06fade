"""A linear map from one embedding space to another, fitted on pairs: the rows of `source` and `target` are the
same sentences (or translations) embedded by two models.

    mapping = fit_map(old_vectors, new_vectors)            # least squares: argmin_W ||X W + b - Y||
    mapping = fit_map(a, b, orthogonal=True)               # a rotation (orthogonal Procrustes), same dimensions
    mapped = mapping.apply(queries)                        # queries of the source space, in the target's
    mapping.save("map.safetensors"); LinearMap.load("map.safetensors")   # a path or a URI

What it is for: comparing spaces that were never trained together (Seki 2018's IntRe aligns the encoders of two
bilingual NMT models this way), aligning a model to its teacher, and a new model to an older one whose vectors
a user stored. The least squares solution is numpy's (`numpy.linalg.lstsq`), the rotation scipy's
(`scipy.linalg.orthogonal_procrustes`); `ridge` adds an L2 penalty for few pairs in many dimensions.
`residual` says how well a map fits (the share of the target's variance it leaves unexplained).
Files are safetensors (no code runs on load), written whole or not at all (`Location.replace_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


class AlignmentError(ValueError):
    """Pairs a map cannot be fitted on: shapes that do not match, too few rows, values that are not finite."""


@dataclass(frozen=True)
class LinearMap:
    weight: np.ndarray  # (D_source, D_target)
    bias: np.ndarray  # (D_target,); zeros for a map without one

    @property
    def dims(self) -> tuple[int, int]:
        return int(self.weight.shape[0]), int(self.weight.shape[1])

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        """(N, D_source) -> (N, D_target), float32."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.weight.shape[0]:
            raise AlignmentError(f"expected vectors of dimension {self.weight.shape[0]}, got shape {vectors.shape}")
        return (vectors @ self.weight + self.bias).astype(np.float32)

    def save(self, path: str | Path) -> None:
        """The map at `path` (a local path or a URI), replaced whole: never written into a file that is there."""
        from safetensors.numpy import save

        from core.location import Location

        tensors = {"weight": np.ascontiguousarray(self.weight), "bias": np.ascontiguousarray(self.bias)}
        Location.of(path).replace_bytes(save(tensors))

    @classmethod
    def load(cls, path: str | Path) -> LinearMap:
        from safetensors.numpy import load

        from core.location import Location

        tensors = load(Location.of(path).read_bytes())
        if set(tensors) != {"weight", "bias"} or tensors["weight"].ndim != 2:
            raise AlignmentError(f"{path}: not a linear map's file (weight and bias)")
        if tensors["bias"].shape != (tensors["weight"].shape[1],):
            raise AlignmentError(f"{path}: its bias does not match its weight's {tensors['weight'].shape[1]} columns")
        return cls(tensors["weight"], tensors["bias"])


def _checked(source: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    source, target = np.asarray(source, dtype=np.float64), np.asarray(target, dtype=np.float64)
    if source.ndim != 2 or target.ndim != 2 or len(source) != len(target):
        raise AlignmentError(
            f"the pairs must be two (N, D) arrays of the same N rows, got {source.shape} and {target.shape}"
        )
    if len(source) < 2:
        raise AlignmentError(f"{len(source)} pair(s): a map needs at least 2")
    for name, array in (("source", source), ("target", target)):
        bad = ~np.isfinite(array).all(axis=1)
        if bad.any():
            raise AlignmentError(f"{name} row {int(np.flatnonzero(bad)[0])} holds a value that is not a finite number")
    return source, target


def fit_map(
    source: np.ndarray,
    target: np.ndarray,
    *,
    orthogonal: bool = False,
    bias: bool = False,
    ridge: float = 0.0,
) -> LinearMap:
    """The map W (and b, with `bias`) that takes row i of `source` nearest to row i of `target` in the least
    squares sense; with `orthogonal`, the rotation that does (the spaces' dimensions must match: a rotation
    keeps cosines, so the source space's own neighbours stay what they were). `ridge` > 0: the penalty
    ridge * ||W||^2, for fewer pairs than dimensions."""
    x, y = _checked(source, target)
    if ridge < 0:
        raise AlignmentError(f"ridge must be 0 or more, not {ridge}")
    if orthogonal and ridge:
        raise AlignmentError("a rotation takes no ridge: its weights' norm is fixed; give one or the other")
    x_mean = x.mean(axis=0) if bias else np.zeros(x.shape[1])
    y_mean = y.mean(axis=0) if bias else np.zeros(y.shape[1])
    xc, yc = x - x_mean, y - y_mean
    if orthogonal:
        if x.shape[1] != y.shape[1]:
            raise AlignmentError(
                f"a rotation maps a space onto one of the same dimension: {x.shape[1]} and {y.shape[1]}"
            )
        from scipy.linalg import orthogonal_procrustes

        weight, _ = orthogonal_procrustes(xc, yc)
    elif ridge > 0:  # the normal equations with the penalty: (X'X + ridge I) W = X'Y
        weight = np.linalg.solve(xc.T @ xc + ridge * np.eye(x.shape[1]), xc.T @ yc)
    else:
        weight, *_ = np.linalg.lstsq(xc, yc, rcond=None)
    offset = y_mean - x_mean @ weight
    return LinearMap(weight.astype(np.float32), offset.astype(np.float32))


def residual(mapping: LinearMap, source: np.ndarray, target: np.ndarray) -> float:
    """The share of `target`'s variance (about its mean) that `mapping` of `source` leaves unexplained: 0 for
    a perfect fit, 1 for none better than the mean."""
    x, y = _checked(source, target)
    error = ((mapping.apply(x).astype(np.float64) - y) ** 2).sum()
    spread = ((y - y.mean(axis=0)) ** 2).sum()
    return float(error / spread) if spread > 0 else 0.0
