"""An S3 server on this machine: moto's server mode (`moto_server`) as its own process, with one bucket.

Children reach it through the standard variables (`S3Server.env`): AWS_ENDPOINT_URL for boto3 and the AWS
CLI, the credentials and the region. pyarrow ignores AWS_ENDPOINT_URL, so it is given `endpoint_override`
and `scheme="http"` (`S3Server.filesystem`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.procs import free_port, spawn, wait_until

START_S = 60
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Server:
    """`endpoint` (http://host:port), `bucket` (made empty at start), `env` (the variables children need),
    `folder` (its log and TMPDIR: all it writes locally; the objects live in its memory)."""

    endpoint: str
    bucket: str
    env: dict[str, str]
    folder: Path

    @property
    def host_port(self) -> str:
        return self.endpoint.split("://", 1)[1]

    def filesystem(self):
        """A pyarrow S3FileSystem on this server."""
        from pyarrow import fs

        return fs.S3FileSystem(
            endpoint_override=self.host_port,
            scheme="http",
            region=REGION,
            access_key=self.env["AWS_ACCESS_KEY_ID"],
            secret_key=self.env["AWS_SECRET_ACCESS_KEY"],
        )

    def client(self):
        """A boto3 S3 client on this server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
        )


@contextlib.contextmanager
def s3_server(
    folder: Path, *, host: str = "127.0.0.1", bucket: str = "interlingua-test", start_s: float = START_S
) -> Iterator[S3Server]:
    """`moto_server` on host:<free port> with `bucket` created; stopped (and its data gone: moto keeps it in
    memory) when the context ends. ClusterStartError with its log's tail if it is not up within `start_s`."""
    moto = Path(sys.executable).with_name("moto_server")
    port = free_port(host)
    (folder / "tmp").mkdir(parents=True, exist_ok=True)
    server = spawn(
        "the S3 server (moto_server)",
        [str(moto), "-H", host, "-p", str(port)],
        folder / "moto.log",
        cwd=folder,
        env={"TMPDIR": str(folder / "tmp")},
    )
    try:
        env = {
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
        }
        s3 = S3Server(env["AWS_ENDPOINT_URL"], bucket, env, folder)
        client = s3.client()
        wait_until(
            lambda: client.list_buckets() is not None, timeout_s=start_s, server=server, what=f"answer on {s3.endpoint}"
        )
        client.create_bucket(Bucket=bucket)
        yield s3
    finally:
        server.stop()
