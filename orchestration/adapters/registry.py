"""The MLflow model registry (champion / challenger): registered versions of the project's models, their tags
and the `champion` alias. Every registry call of the project; the runs are `adapters.tracking`'s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from core import fencing
from orchestration.adapters import tracking

CHAMPION = "champion"
COMPATIBLE_TAG = "interlingua.compatible_with"  # vN: the old version whose stored vectors its queries search


def log_pyfunc_model(
    uri: str,
    run_id: str,
    model_dir: str | os.PathLike,
    embedding_dim: int,
    *,
    code: str | os.PathLike,
    wheel: Path,
    requirements: list[str],
):
    """Log the model directory as a pyfunc model in `run_id`, its code the file `code` (MLflow's models from
    code: nothing is pickled); returns mlflow's ModelInfo. The project's `wheel` goes into the model's `code/`
    folder and its requirements.txt names it, beside `requirements` (pinned distributions), so that it
    installs where the project is not (`mlflow models serve`, a fresh venv): `lifecycle.packaging.log_model`
    builds both."""
    import mlflow
    import numpy as np
    import pandas as pd
    from mlflow.models import infer_signature

    mlflow.set_tracking_uri(uri)
    example = pd.DataFrame({"sentence": ["in the beginning god created the heaven and the earth."], "lang": ["en"]})
    signature = infer_signature(example, np.zeros((1, embedding_dim), dtype=np.float32))
    with mlflow.start_run(run_id=run_id):
        return mlflow.pyfunc.log_model(
            name="pyfunc",
            python_model=str(code),
            artifacts={"model_dir": str(model_dir)},
            code_paths=[str(wheel)],
            signature=signature,
            input_example=example,
            # relative to the model's folder, where MLflow's environment managers run pip
            pip_requirements=[f"code/{wheel.name}", *requirements],
        )


def register_model(uri: str, model_uri: str, name: str, tags: Mapping[str, str]) -> str:
    """A new version of registered model `name`; returns its version number. MLflow's own lines about it
    ("Successfully registered model", "Created version"), which it prints past its logger's level, show with -v
    only: the command reports the version it made."""
    fencing.check()
    import mlflow
    from mlflow.utils import logging_utils

    from orchestration.adapters import logs

    mlflow.set_tracking_uri(uri)
    quiet = logs.verbosity() < logs.VERBOSE
    if quiet:
        logging_utils.disable_logging()
    try:
        version = mlflow.register_model(model_uri, name, tags=dict(tags))
    finally:
        if quiet:
            logging_utils.enable_logging()
    return str(version.version)


def find_version(uri: str, name: str, tag: str, value: str) -> str | None:
    """The version of `name` tagged tag=value, if any."""
    from mlflow.exceptions import MlflowException

    try:
        versions = tracking._client(uri).search_model_versions(f"name={tracking.literal(name)}")
    except MlflowException:
        return None
    for version in versions:
        if version.tags.get(tag) == value:
            return str(version.version)
    return None


def set_version_tags(uri: str, name: str, version: str, tags: Mapping[str, str]) -> None:
    """Tag a registered version (after its registration: what only its evaluation tells)."""
    fencing.check()
    client = tracking._client(uri)
    for key, value in tags.items():
        client.set_model_version_tag(name, version, key, value)


def version_tags(uri: str, name: str, version: str) -> dict[str, str]:
    """The tags of one registered version."""
    return dict(tracking._client(uri).get_model_version(name, version).tags)


def model_versions(uri: str, name: str) -> list:
    """Every registered version of the model `name` (each with .version and .tags)."""
    return list(tracking._client(uri).search_model_versions(f"name={tracking.literal(name)}"))


def champion(uri: str, name: str):
    """The model version holding the champion alias, or None."""
    from mlflow.exceptions import MlflowException

    try:
        return tracking._client(uri).get_model_version_by_alias(name, CHAMPION)
    except MlflowException:
        return None


def promote(uri: str, name: str, version: str) -> None:
    """Move the champion alias of `name` to `version`. Its first setting creates it: when another command
    creates it at the same moment, the store refuses one of the two (the alias is a unique key: MLflow's
    BAD_REQUEST from the database, or RESOURCE_ALREADY_EXISTS); the alias exists then, and is set again."""
    from mlflow.exceptions import MlflowException

    fencing.check()
    client = tracking._client(uri)
    try:
        client.set_registered_model_alias(name, CHAMPION, version)
    except MlflowException as exc:
        if exc.error_code not in (*tracking.ALREADY_EXISTS, "BAD_REQUEST") or champion(uri, name) is None:
            raise
        fencing.check()
        client.set_registered_model_alias(name, CHAMPION, version)  # an update of the other's alias now


MAX_DESCRIPTION = 5000  # characters of a model version's description in MLflow's SQL registry


def attach_card(uri: str, name: str, version: str, run_id: str, card: str, file: str) -> None:
    """The model card `card` (Markdown) as the version's description, which the MLflow UI renders on its page,
    and as the artifact `file` of its training run `run_id`."""
    fencing.check()
    client = tracking._client(uri)
    client.log_text(run_id, card, file)
    if len(card) > MAX_DESCRIPTION:  # the SQL registry's column: the card's head, and where the whole card is
        note = f"\n\n(cut here: the whole card is `{file}` in the artifacts of run {run_id})\n"
        card = card[: MAX_DESCRIPTION - len(note)].rsplit("\n", 1)[0] + note
    client.update_model_version(name, version, description=card)


def version_card(uri: str, name: str, version: str) -> str | None:
    """The description of a registered version (its model card), None when it has none; LookupError when the
    version is not registered."""
    from mlflow.exceptions import MlflowException

    try:
        found = tracking._client(uri).get_model_version(name, version)
    except MlflowException as exc:
        raise LookupError(f"{name} has no version {version}") from exc
    return found.description or None


def download_model_dir(uri: str, name: str, version: str, dst: str | os.PathLike) -> Path:
    """The model directory inside a registered pyfunc version, downloaded to `dst`. BoundaryError, before
    anything is copied, when the version's artifacts in a local store hold a symbolic link: the registry's
    folders were written by someone else, and MLflow's copy follows a link (to /etc/shadow: `core.boundary`);
    the download itself is held to the same rule. FileNotFoundError when it holds no model directory."""
    import mlflow

    from core import boundary
    from orchestration.adapters.model_dir import MODEL_FILE

    what = f"the registered version models:/{name}/{version}, at"
    source = _local_path(tracking._client(uri).get_model_version_download_uri(name, version))
    if source is not None:
        boundary.check_no_links(source, what)
    mlflow.set_tracking_uri(uri)
    local = mlflow.artifacts.download_artifacts(artifact_uri=f"models:/{name}/{version}", dst_path=str(dst))
    boundary.check_no_links(local, what)
    found = [p.parent for p in Path(local).rglob(MODEL_FILE)]
    if not found:
        raise FileNotFoundError(f"models:/{name}/{version} holds no {MODEL_FILE}")
    return found[0]


def _local_path(artifact_uri: str) -> Path | None:
    """The folder on this host that a `file:` (or schemeless) artifact URI names; None for any other store."""
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    parsed = urlparse(artifact_uri)
    if parsed.scheme == "file":
        return Path(url2pathname(parsed.path))
    return Path(artifact_uri) if not parsed.scheme else None
