"""`interlingua serve`: the embedding endpoint on Ray Serve, until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import shutil
import signal
import tempfile
import threading

from core.errors import Exit
from orchestration.cli.common import command
from orchestration.config import Config


def add_serve(sub: argparse._SubParsersAction) -> None:
    command(
        sub,
        "serve",
        serve,
        example="interlingua serve -c configs/bible6-cpu.yaml serve.port=8000   # POST /embed",
        help="an HTTP endpoint embedding sentences with the champion (Ray Serve), swapped as it changes",
        description='Serve POST /embed {"sentences": [...], "lang": "fr"} -> embeddings and the model '
        "version, with GET /healthz and /readyz, on serve.host:serve.port. serve.model=champion (default) serves "
        "the registered champion of registry.model_name and switches to a newly promoted one without dropping a "
        "request; a model directory is served as is. Limits: 413/422 with a message; overload: 503.",
    )


def serve(config: Config, args: argparse.Namespace) -> int:
    from orchestration.adapters import tracking
    from orchestration.serve import app
    from orchestration.serve.models import ModelSource

    source = ModelSource(config)
    if source.follows:
        tracking.check_reachable(source.uri)
    version = source.current_version()  # no champion, no model: one line and exit 2 before Ray starts
    stopped, signals = threading.Event(), []

    def on_signal(signum, frame) -> None:
        signals.append(signum)
        stopped.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    # the champions the replicas download, in a folder of this command's: removed with it, however it stops
    scratch = tempfile.mkdtemp(prefix="interlingua-serve-")
    try:
        url = app.start(config, scratch)
        following = f"champion of {source.name}, version {version}" if source.follows else config.serve.model
        print(f"serving {following} at {url}/embed (GET /healthz, /readyz); Ctrl-C stops", flush=True)
        stopped.wait()
    finally:
        app.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    # Ctrl+C is an interruption (130, as every command); SIGTERM is how an operator stops a server (0)
    return Exit.INTERRUPTED if signals and signals[0] == signal.SIGINT else Exit.OK
