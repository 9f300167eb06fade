"""The operator's output as the tests read it: the library lines that must not reach it, and a command run as
a person runs it."""

from __future__ import annotations

import re
import subprocess
import sys

# Each library line the issue found in the demo's output, and a few more of the same kind.
NOISE = re.compile(
    "|".join(
        [
            r"GCSFileSystem",
            r"apitools not found",
            r"bigquery",
            r"Using yield and return",  # Beam
            r"read bible book",
            r"wrote (train|dev|test)/part-",  # one line per book, per shard
            r"faiss\.loader",
            r"AVX512",
            r"AVX2",
            r"Loading faiss",  # faiss's loader
            r"Creating initial MLflow database tables",
            r"Updating database tables",
            r"mlflow\.store",  # MLflow
            r"Successfully registered model",
            r"Created version '\d+' of model",
            r"Started a local Ray instance",
            r"Token authentication is enabled",
            r"streaming_executor",  # Ray
            r"logging_progress",
            r"Execution plan of Dataset",
            r"TrainingReport\(",
            r"Reporting training result",
            r"Checkpoint successfully created",
            r"Requesting resources",
        ]
    )
)
# Any line of Ray's C++ core (`[2026-11-29 01:51:11,171 E 6672 6672] core_worker.cc:2465: ...`), with or without
# the `(TrainController pid=...)` prefix of a worker's streamed output.
RAY_CPP = re.compile(r"\[\d{4}-\d\d-\d\d [\d:,.]+ [DIWEF] \d+ \d+\]|\b\w+\.cc:\d+:")


def interlingua(*args: str) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", *args], capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr
    return out


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def assert_no_noise(out: subprocess.CompletedProcess) -> None:
    noisy = [line for line in (out.stdout + out.stderr).splitlines() if NOISE.search(line)]
    assert not noisy, "\n".join(noisy)
