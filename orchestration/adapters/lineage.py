"""What MLflow's own UI shows of a run's lineage, through MLflow's public API: the experiment's kind, each
run's source (the command, the project's version and git commit), the datasets it read as dataset inputs,
and the error matrix as a table. `adapters.tracking` calls this module when it creates experiments and runs.

    tracker.run(..., inputs=[lineage.prepared_input(data, context="training", splits=("train", "dev"))])

A dataset input is described from the dataset's manifest alone (never by reading its shards): its source
is the dataset's folder or URI, its digest the manifest's fingerprint (the first `DIGEST_CHARS`: MLflow
keeps 36 characters), its schema one text column per language, its profile the manifest's counts.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from core.location import Location

# The tag MLflow 3's UI reads to open an experiment on its runs table and model metrics, not its GenAI view
# (traces, prompts): the values its UI knows are "custom_model_development" and "genai_development".
EXPERIMENT_KIND_TAG, MODEL_TRAINING = "mlflow.experimentKind", "custom_model_development"
NOTE_TAG = "mlflow.note.content"  # a run's description in the UI (markdown)
SOURCE_NAME, SOURCE_TYPE, SOURCE_COMMIT = "mlflow.source.name", "mlflow.source.type", "mlflow.source.git.commit"
VERSION_TAG = "interlingua.version"  # the installed project's version
CONTEXT_TAG = "mlflow.data.context"  # a dataset input's role, as `mlflow.log_input(context=...)` sets it
SPLITS_TAG = "interlingua.splits"  # the splits of the dataset the run read
DIGEST_CHARS = 16
MATRIX_TABLE = "error_matrix_table.json"  # the error matrix as a table the UI previews
_SOURCE_KEYS = (SOURCE_NAME, SOURCE_TYPE, SOURCE_COMMIT, VERSION_TAG)


# --- where a run comes from -----------------------------------------------------------------------------


def from_cli() -> bool:
    """Whether this process is the `interlingua` command (the console script or `python -m orchestration.cli`)."""
    program = sys.argv[0] if sys.argv else ""
    return Path(program).name == "interlingua" or program.endswith(os.path.join("orchestration", "cli", "__main__.py"))


def command() -> str:
    """`interlingua train` when this process is the command line, else the program's name (`pytest`; a module
    run with `python -m` by its package's name; `python` for `python -c`)."""
    if from_cli():
        return " ".join(["interlingua", *[a for a in sys.argv[1:] if not a.startswith("-")][:1]])
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] not in ("", "-c") else None
    if program is None:
        return "python"
    return program.parent.name if program.name == "__main__.py" else program.name


@functools.cache
def project_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("interlingua")
    except PackageNotFoundError:  # a checkout that was never installed
        return "unknown"


@functools.cache
def git_commit() -> str | None:
    """The commit checked out where the project's code lies, or None (an installed wheel, no git)."""
    import orchestration

    root = Path(orchestration.__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and len(commit) == 40 else None


def source_tags(parent: Mapping[str, str] | None = None) -> dict[str, str]:
    """MLflow's source tags of a new run: the command and the project's version (`interlingua run (0.1.0)`),
    and the git commit when the code is a checkout. A run started outside the command line (a Ray Tune trial,
    a test) under a `parent` run that has them takes its parent's: the command that started it all."""
    if parent and SOURCE_NAME in parent and not from_cli():
        return {key: parent[key] for key in _SOURCE_KEYS if key in parent}
    version = project_version()
    tags = {SOURCE_NAME: f"{command()} ({version})", SOURCE_TYPE: "LOCAL", VERSION_TAG: version}
    commit = git_commit()
    if commit:
        tags[SOURCE_COMMIT] = commit
    return tags


# --- what a run read ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataInput:
    """A dataset a run read, as MLflow's dataset input: described, never read."""

    name: str
    location: str  # a local folder (absolute) or a URI
    fingerprint: str
    languages: tuple[str, ...]
    profile: Mapping[str, object]  # counts, shown as the dataset's profile
    context: str  # "training" or "evaluation"
    tags: dict[str, str] = field(default_factory=dict)


def prepared_input(data, *, context: str, splits: Sequence[str], name: str | None = None) -> DataInput:
    """A prepared dataset (`core.dataset.Dataset`) as an input: its manifest's fingerprint, languages and
    counts; `splits` (those the run read) go into the input's tags."""
    manifest = data.manifest
    counts = manifest.counts
    profile = {
        "tuples": dict(counts.tuples.out),
        "tuples_read": counts.tuples.read,
        "tuples_dropped": dict(counts.tuples.dropped),
        "sentences": {lang: dict(tally.out) for lang, tally in counts.sentences.items()},
        "vocab_size": manifest.spm.vocab_size,
    }
    location = Location.of(data.location)
    return DataInput(
        name or manifest.config_name or location.name,
        location.text,
        manifest.fingerprint,
        tuple(manifest.languages),
        profile,
        context,
        {SPLITS_TAG: ",".join(splits)},
    )


def testset_input(testset) -> DataInput:
    """An `evaluate.testsets` set as the input of its evaluation (`evaluate.testsets.Testset`: its name,
    identity, languages and counts): a pinned dataset's split as that dataset, or line-aligned files under
    their common folder with the fingerprint of their sha256."""
    if "dataset" in testset.identity:
        from core.dataset import Dataset

        pinned = Dataset.open(testset.identity["dataset"])
        found = prepared_input(pinned, context="evaluation", splits=(testset.identity["split"],), name=testset.name)
        return DataInput(
            found.name,
            found.location,
            found.fingerprint,
            tuple(testset.languages),
            {**found.profile, "evaluated_tuples": len(testset.table)},
            found.context,
            found.tags,
        )
    files = {lang: entry["path"] for lang, entry in testset.identity["files"].items()}
    profile = {
        "tuples": len(testset.table),
        "tuples_read": testset.read,
        "tuples_dropped": dict(testset.dropped),
        "files": files,
    }
    return DataInput(
        testset.name,
        _common_folder(list(files.values())),
        testset.data,
        tuple(testset.languages),
        profile,
        "evaluation",
    )


def evaluated_input(data_dir, split: str, testset=None) -> DataInput:
    """What an evaluation searched: the test set `testset`, else the prepared dataset's `split`."""
    from core.dataset import Dataset

    if testset is not None:
        return testset_input(testset)
    return prepared_input(Dataset.open(data_dir), context="evaluation", splits=(split,))


def _common_folder(paths: list[str]) -> str:
    folder = os.path.commonprefix(paths).rsplit("/", 1)[0]
    return folder if folder and not folder.endswith(":/") else paths[0]


def log_inputs(client, run_id: str, inputs: Sequence[DataInput]) -> None:
    """Log `inputs` as the run's dataset inputs (MlflowClient.log_inputs; one already there is not doubled)."""
    if not inputs:
        return
    from mlflow.entities import Dataset as DatasetEntity
    from mlflow.entities import DatasetInput, InputTag

    logged = []
    for item in inputs:
        described = _dataset(item)
        tags = [InputTag(CONTEXT_TAG, item.context), *[InputTag(k, v) for k, v in item.tags.items()]]
        logged.append(DatasetInput(DatasetEntity(**described.to_dict()), tags=tags))
    client.log_inputs(run_id, datasets=logged)


def _dataset(item: DataInput):
    """MLflow's MetaDataset of `item` (metadata only), with its profile: MetaDataset itself has none."""
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.types import ColSpec, DataType, Schema

    class ProfiledDataset(MetaDataset):
        @property
        def profile(self) -> Mapping[str, object]:
            return item.profile

        def to_dict(self) -> dict[str, str]:
            return {**super().to_dict(), "profile": json.dumps(self.profile)}

    with warnings.catch_warnings():  # a local path resolves to two registered local sources, both the same
        warnings.simplefilter("ignore", UserWarning)
        source = resolve_dataset_source(item.location)
    schema = Schema([ColSpec(DataType.string, lang) for lang in item.languages])
    return ProfiledDataset(source, name=item.name, digest=item.fingerprint[:DIGEST_CHARS], schema=schema)


# --- what a run measured -----------------------------------------------------------------------------------


def error_table(matrix_csv: Path) -> dict[str, list]:
    """The error matrix of `evaluation.report`'s error_matrix.csv as a table in percent: a column `query` (the
    query languages), then one per searched language; None on the diagonal."""
    rows = list(csv.reader(io.StringIO(matrix_csv.read_text())))
    searched = rows[0][1:]
    table: dict[str, list] = {"query": [row[0] for row in rows[1:]], **{lang: [] for lang in searched}}
    for row in rows[1:]:
        for lang, cell in zip(searched, row[1:]):
            table[lang].append(round(100 * float(cell), 2) if cell else None)
    return table
