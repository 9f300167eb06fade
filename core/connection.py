"""The object store's connection: its endpoint, region and scheme, from the standard variables users already set
or from a config's `storage` section (`configure`, which sets the same variables so that the Ray workers this
process starts inherit them); what a worker on another node needs of them (`environment`); and the options of
pyarrow's S3 client (`s3_options`, read by `core.storage` for every s3:// location)."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

# pyarrow's S3 client reads the keys and region itself but ignores the endpoint variable: passed on here.
ENDPOINT_ENV, REGION_ENV, SCHEME_ENV = "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "INTERLINGUA_S3_SCHEME"
ENV = (ENDPOINT_ENV, REGION_ENV, SCHEME_ENV)
CREDENTIALS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
FORWARD_ENV = "INTERLINGUA_FORWARD_CREDENTIALS"  # set by `configure(forward_credentials=True)`; travels with them


def configure(
    endpoint: str | None = None, region: str | None = None, scheme: str | None = None, forward_credentials: bool = False
) -> None:
    """Use this object store endpoint (`http://host:port` or `host:port`), region and scheme for s3://
    locations in this process and, through the environment, in the Ray workers it starts. None keeps what
    the environment says. `forward_credentials`: `environment()` also carries this process's keys."""
    for name, value in ((ENDPOINT_ENV, endpoint), (REGION_ENV, region), (SCHEME_ENV, scheme)):
        if value is not None:
            os.environ[name] = value
    if forward_credentials:
        os.environ[FORWARD_ENV] = "1"


def environment() -> dict[str, str]:
    """The storage variables set in this process that a worker process on another node needs to reach the same
    store: its endpoint, region and scheme. Never the keys, unless forwarding was asked for
    (`storage.forward_credentials`): a worker uses its own node's credential chain (environment, instance role,
    web identity), and what goes into a Ray runtime_env is shown in Ray's job metadata and dashboard."""
    names = ENV + ((*CREDENTIALS_ENV, FORWARD_ENV) if os.environ.get(FORWARD_ENV) == "1" else ())
    return {name: os.environ[name] for name in names if os.environ.get(name)}


def s3_options() -> dict[str, str]:
    """`pyarrow.fs.S3FileSystem` options from the environment (see `configure`)."""
    options: dict[str, str] = {}
    endpoint = os.environ.get(ENDPOINT_ENV, "")
    if endpoint:
        parsed = urlsplit(endpoint if "://" in endpoint else f"//{endpoint}")
        options["endpoint_override"] = parsed.netloc or parsed.path
        if parsed.scheme:
            options["scheme"] = parsed.scheme
    if os.environ.get(SCHEME_ENV):
        options["scheme"] = os.environ[SCHEME_ENV]
    if os.environ.get(REGION_ENV):
        options["region"] = os.environ[REGION_ENV]
    return options
