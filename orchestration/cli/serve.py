"""`interlingua serve`: the embedding endpoint on Ray Serve, until SIGINT or SIGTERM."""
from __future__ import annotations

import argparse
import signal
import threading

from core.errors import Exit
from orchestration.cli.common import command
from orchestration.config import Config


def add_serve(sub: argparse._SubParsersAction) -> None:
    command(sub, "serve", serve,
            example="interlingua serve -c configs/bible6-cpu.yaml serve.port=8000   # POST /embed",
            help="an HTTP endpoint embedding sentences with the champion (Ray Serve), swapped as it changes",
            description="Serve POST /embed {\"sentences\": [...], \"lang\": \"fr\"} -> embeddings and the model "
            "version, with GET /healthz and /readyz, on serve.host:serve.port. serve.model=champion (default) serves "
            "the registered champion of registry.model_name and switches to a newly promoted one without dropping a "
            "request; a model directory is served as is. Limits: 413/422 with a message; overload: 503.")


def serve(config: Config, args: argparse.Namespace) -> int:
    from orchestration import tracking
    from orchestration.serve import app
    from orchestration.serve.models import ModelSource

    source = ModelSource(config)
    if source.follows:
        tracking.check_reachable(source.uri)
    version = source.current_version()  # no champion, no model: one line and exit 2 before Ray starts
    stopped = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())
    try:
        url = app.start(config)
        following = f"champion of {source.name}, version {version}" if source.follows else config.serve.model
        print(f"serving {following} at {url}/embed (GET /healthz, /readyz); Ctrl-C stops", flush=True)
        stopped.wait()
    finally:
        app.stop()
    return Exit.OK
