"""`interlingua evaluate`: the Ray batch job that measures a model by similarity search.

    embedding.py   Ray Data: a split's complete tuples -> embeddings per language on disk (model or USE)
    job.py         evaluate(): the stage cache, embedding, sharded search (`evaluation.xsim` on Ray
                   tasks reading the stored embeddings), metrics, report files and the MLflow run
"""
from __future__ import annotations

from core.errors import UserError


class EvaluateError(UserError, RuntimeError):
    """An evaluation that cannot run as asked; the message says what to change."""
