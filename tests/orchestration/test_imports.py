"""Only `prepare` (and `run`, which prepares) imports Apache Beam: its import is slow and warns about
GCS and BigQuery client libraries, which an `embed` or a `search` has no use for."""
from __future__ import annotations

import subprocess
import sys

import pytest

# What train, evaluate, search, embed, mine, compare and tune import, at module level and in their functions.
BEAM_FREE = [
    "orchestration.cli",
    "orchestration.train.driver",
    "orchestration.train.loop",
    "orchestration.train.checkpoint",
    "orchestration.train.tune",
    "orchestration.evaluate.job",
    "orchestration.evaluate.embedding",
    "orchestration.serve.embedder",
    "orchestration.serve.corpus",
    "orchestration.serve.nearest",
    "orchestration.serve.pyfunc",
    "orchestration.mine.job",
    "orchestration.mine.inputs",
    "orchestration.lifecycle.compare",
    "orchestration.tracking",
    "pipelines.clean",
    "pipelines.sources",
    "pipelines.dataset",
    "pipelines.tokenizer",
]


def imported_beam(modules: list[str]) -> bool:
    code = f"import sys\nfor m in {modules!r}: __import__(m)\nprint('apache_beam' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip() == "True"


@pytest.mark.slow
def test_the_commands_that_run_no_beam_job_do_not_import_beam():
    assert not imported_beam(BEAM_FREE)
    assert imported_beam(["pipelines.prepare"])  # the check can fail: prepare does import it
