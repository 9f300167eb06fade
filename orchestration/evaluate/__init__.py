"""`interlingua evaluate`: the Ray batch job that measures a model by similarity search.

embedding.py   Ray Data: a split's complete tuples -> embeddings per language on disk (model or USE)
job.py         evaluate(): the stage cache, embedding, sharded search (`evaluation.xsim` on Ray
               tasks reading the stored embeddings), metrics, report files and the MLflow run
"""

from __future__ import annotations

from pydantic import ConfigDict

from core.errors import UserError
from orchestration.adapters.state import StageRecord


class EvaluateError(UserError, RuntimeError):
    """An evaluation that cannot run as asked; the message says what to change."""


class EvaluationRecord(StageRecord):
    """`state.json` in an evaluation's output folder, the stage state of `evaluate` (`adapters.state`): what the
    report was made from, its MLflow run, and `data`, what was searched (its fingerprint, as tagged)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    data: str
