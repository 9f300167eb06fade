"""The tracking server of the test cluster: PostgreSQL (Debian's `postgresql` binaries, a throwaway data
folder) with `mlflow server` in front of it, its artifacts in the S3 server's bucket, and MLflow's basic
authentication (`--app-name basic-auth`): every request but the health check needs a user's credentials, which
clients take from MLflow's standard variables (`credentials`).

PostgreSQL refuses to run as root, so under root (as in CI) it runs as `nobody` from a folder of its own
under /tmp (pytest's folders are root's, mode 0700, which `nobody` cannot enter).
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from orchestration.adapters import tracking
from tests.support.procs import ClusterStartError, free_port, spawn, wait_until
from tests.support.s3 import S3Server

PG_START_S = 60
MLFLOW_START_S = 180  # its first start on an empty database runs every schema migration
INSTALL_HINT = "install Debian's PostgreSQL server (`apt-get install -y postgresql`; .ci/run does it)"


USERNAME_ENV, PASSWORD_ENV = tracking.CREDENTIALS_ENV  # MLflow's client reads them


def credentials(username: str = "interlingua") -> dict[str, str]:
    """A user of the tracking server with a fresh password, as MLflow's client variables."""
    return {USERNAME_ENV: username, PASSWORD_ENV: secrets.token_urlsafe(16)}


@dataclass(frozen=True)
class TrackingServer:
    """`uri`: http://host:port for `tracking.uri`; `artifacts`: where the server keeps artifacts (s3://...);
    `database`: the PostgreSQL URL of its backend store; `folders`: all the two servers write locally (their
    logs, TMPDIRs and PostgreSQL's data); `env`: the variables that give a client the admin's credentials."""

    uri: str
    artifacts: str
    database: str
    folders: tuple[Path, ...]
    env: dict[str, str]


def postgres_bin() -> Path:
    """The folder of PostgreSQL's server binaries (INTERLINGUA_PG_BIN, else the newest
    /usr/lib/postgresql/*/bin); ClusterStartError naming what to install when there is none."""
    if os.environ.get("INTERLINGUA_PG_BIN"):
        found = [os.environ["INTERLINGUA_PG_BIN"]]
    else:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
    for folder in reversed(found):
        if all((Path(folder) / tool).exists() for tool in ("initdb", "postgres")):
            return Path(folder)
    raise ClusterStartError(
        f"PostgreSQL did not start: no initdb and postgres in {found or '/usr/lib/postgresql/*/bin'}; {INSTALL_HINT}"
    )


def _as_server_user(folder: Path) -> list[str]:
    """The command prefix that runs PostgreSQL as a user it accepts (not root), owning `folder`."""
    if os.geteuid() != 0:
        return []
    shutil.chown(folder, "nobody")
    return ["runuser", "-u", "nobody", "--"]


@contextlib.contextmanager
def postgres(log_dir: Path, *, start_s: float = PG_START_S) -> Iterator[tuple[str, Path]]:
    """A fresh PostgreSQL cluster on 127.0.0.1:<free port> (trust auth, fsync off: a test's database) with a
    database `mlflow`; yields its URL and its folder (data, socket, TMPDIR), deleted when the context ends."""
    binaries = postgres_bin()
    folder = Path(tempfile.mkdtemp(prefix="interlingua-pg-"))
    try:
        prefix = _as_server_user(folder)
        init = subprocess.run(
            [
                *prefix,
                str(binaries / "initdb"),
                "-D",
                str(folder / "data"),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            capture_output=True,
            text=True,
            timeout=start_s,
        )
        if init.returncode != 0:
            raise ClusterStartError(
                f"PostgreSQL did not start: initdb exited with {init.returncode}:\n"
                f"{(init.stdout + init.stderr)[-3000:]}"
            )
        port = free_port()
        server = spawn(
            "PostgreSQL",
            [
                str(binaries / "postgres"),
                "-D",
                str(folder / "data"),
                "-k",
                str(folder),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-F",
            ],
            log_dir / "postgres.log",
            prefix=prefix,
            cwd=folder,
            env={"TMPDIR": str(folder)},
        )
        try:
            url = f"postgresql://postgres@127.0.0.1:{port}"  # libpq's form, for psycopg2
            wait_until(
                lambda: _create_database(url, "mlflow"), timeout_s=start_s, server=server, what=f"connection on {url}"
            )
            # SQLAlchemy's form: without the driver named it picks psycopg 3, which the test extra lacks
            yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/mlflow", folder
        finally:
            server.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _create_database(url: str, name: str) -> bool:
    import psycopg2

    with contextlib.closing(psycopg2.connect(f"{url}/postgres", connect_timeout=5)) as connection:
        connection.autocommit = True  # CREATE DATABASE cannot run inside a transaction
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {name}")
    return True


@contextlib.contextmanager
def tracking_server(
    log_dir: Path,
    s3: S3Server,
    *,
    admin: dict[str, str] | None = None,
    host: str = "127.0.0.1",
    start_s: float = MLFLOW_START_S,
) -> Iterator[TrackingServer]:
    """PostgreSQL and `mlflow server` on host:<free port>, its artifacts under s3://<bucket>/mlflow, its users
    (`admin`, else fresh `credentials()`) in a database of its own beside; both stopped when the context ends."""
    admin = admin or credentials()
    with postgres(log_dir) as (database, data):
        port = free_port(host)
        artifacts = f"s3://{s3.bucket}/mlflow"
        (log_dir / "tmp").mkdir(parents=True, exist_ok=True)
        # MLflow's basic-auth app: users in a database of their own, admin created at the first start; a user
        # who logged in reads everything (default_permission), writes what it owns; the check of a password
        # (PBKDF2) cached for a minute per user
        (log_dir / "basic_auth.ini").write_text(
            "[mlflow]\ndefault_permission = READ\n"
            f"database_uri = sqlite:///{log_dir / 'basic_auth.db'}\n"
            f"admin_username = {admin[USERNAME_ENV]}\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
            "auth_cache_ttl_seconds = 60\n"
        )
        env = {
            **s3.env,
            "MLFLOW_S3_ENDPOINT_URL": s3.endpoint,
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            "TMPDIR": str(log_dir / "tmp"),
            "MLFLOW_AUTH_CONFIG_PATH": str(log_dir / "basic_auth.ini"),
            "MLFLOW_AUTH_ADMIN_PASSWORD": admin[PASSWORD_ENV],
            "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16),
        }  # its forms' CSRF protection
        server = spawn(
            "the MLflow tracking server",
            [
                str(Path(sys.executable).with_name("mlflow")),
                "server",
                "--app-name",
                "basic-auth",
                "--backend-store-uri",
                database,
                "--artifacts-destination",
                artifacts,
                "--host",
                host,
                "--port",
                str(port),
                "--workers",
                "1",
            ],
            log_dir / "mlflow-server.log",
            env=env,
            cwd=log_dir,
        )
        try:
            uri = f"http://{host}:{port}"
            wait_until(lambda: _answers(uri), timeout_s=start_s, server=server, what=f"answer on {uri}", every_s=1)
            yield TrackingServer(uri, artifacts, database, (log_dir, data), dict(admin))
        finally:
            server.stop()


@contextlib.contextmanager
def sqlite_server(log_dir: Path, *, start_s: float = MLFLOW_START_S) -> Iterator[str]:
    """`mlflow server` on 127.0.0.1:<free port> over a SQLite file, artifacts in a local folder, no users: for a
    test whose commands must not share the SQLite file itself (a paused writer would hold its lock); its URI."""
    port = free_port("127.0.0.1")
    env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = spawn(
        "the MLflow tracking server",
        [
            str(Path(sys.executable).with_name("mlflow")),
            "server",
            "--backend-store-uri",
            f"sqlite:///{log_dir / 'mlflow.db'}",
            "--artifacts-destination",
            str(log_dir / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        log_dir / "mlflow-server.log",
        env=env,
        cwd=log_dir,
    )
    try:
        uri = f"http://127.0.0.1:{port}"
        wait_until(lambda: _answers(uri), timeout_s=start_s, server=server, what=f"answer on {uri}", every_s=1)
        yield uri
    finally:
        server.stop()


def _answers(uri: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(f"{uri}/health", timeout=5) as response:
        return response.status == 200
