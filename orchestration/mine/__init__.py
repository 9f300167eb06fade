"""`interlingua mine`: margin-based bitext mining from monolingual text, feeding retraining.

    inputs.py   the sentences of each language: read, normalized as at training, deduplicated
    job.py      mine(): embed, search both ways, score by ratio margin, filter, threshold, write, log
    report.py   the mined pairs as Parquet with a manifest, and the report (histogram, curve)

The mined pairs are a `prepare` source (`kind: mined`), so `interlingua run`
retrains on them and promotes the model only when the evaluation improves.
"""

from __future__ import annotations

from core.errors import UserError


class MineError(UserError, ValueError):
    """A mining run that cannot start as asked; the message says what to change."""
