"""Where the tracking store is and whether it answers: its URI made absolute, how a user browses it, a client
of it, and the probe every command runs before long work (a store that is down, or a server that refuses the
command's login, is one line in seconds). `orchestration.adapters.tracking` re-exports each."""

from __future__ import annotations

import os
from pathlib import Path

from core.errors import UserError


def resolve_uri(uri: str) -> str:
    """Make a relative sqlite or file store absolute, so Ray workers elsewhere reach the same store."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(uri[len("sqlite:///") :]).resolve())
    if "://" not in uri:
        return str(Path(uri).resolve())
    return uri


def how_to_browse(uri: str) -> str:
    """What a user runs to see the store's runs: a server has its own web UI; a local store needs `mlflow ui`."""
    if uri.startswith(("http://", "https://")):
        return f"open {uri} in a browser"
    return f"`mlflow ui --backend-store-uri {uri}`"


def client(uri: str):
    """An MLflow client of the store at `uri` (a local sqlite store's folder created first)."""
    from mlflow.tracking import MlflowClient

    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    return MlflowClient(tracking_uri=uri)


# MLflow's client reads a tracking server's login from these (`mlflow server --app-name basic-auth`)
CREDENTIALS_ENV = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
_REFUSED = ("UNAUTHENTICATED", "PERMISSION_DENIED")


class TrackingLoginError(UserError):
    """The tracking server answers but refuses this command's credentials (or their absence)."""


def check_reachable(uri: str) -> None:
    """Fail fast, before any long work, when the tracking store cannot be reached."""
    from unittest import mock

    quick = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
    try:
        with mock.patch.dict(os.environ, quick):  # a probe, not a long retry loop; the variables restored after
            client(uri).search_experiments(max_results=1)
    except Exception as exc:  # noqa: BLE001 - any failure here means "unreachable"
        code = getattr(exc, "error_code", None)
        if code in _REFUSED:
            raise TrackingLoginError(
                f"tracking.uri: {uri} refused this command ({code}): give it a user's credentials in "
                f"MLflow's variables, {', '.join(CREDENTIALS_ENV)} (basic auth), or MLFLOW_TRACKING_TOKEN"
            ) from None
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConnectionError(f"MLflow tracking store {uri} is unreachable: {first_line}") from None
