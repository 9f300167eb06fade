"""The serving tests' server: `interlingua serve` in a child process, on loopback, with small limits."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from core.dataset import file_sha256
from orchestration.adapters import model_dir as files
from orchestration.config import load_config
from orchestration.embedding.embedder import SentenceEmbedder
from tests.support.procs import free_ports, stop, wait_for
from tests.support.runs import other_weights, store_uri, untrained_model_dir
from tests.support.serving import NAME, get, register

ROOT = Path(__file__).resolve().parents[3]
LIMITS = [
    "serve.max_batch_size=4",
    "serve.max_ongoing_requests=4",
    "serve.max_queued_requests=6",
    "serve.max_sentences=16",
    "serve.max_sentence_chars=300",
    "serve.max_body_bytes=8000",
    "serve.poll_seconds=0.5",
    "serve.cpus_per_replica=1",
    # test_edge.py: slow clients and expensive requests
    "serve.body_timeout_s=15",
    "serve.slow_body_s=1",
    "serve.max_slow_bodies=2",
    "serve.max_slow_bodies_per_client=1",
    "serve.max_nearest_hits=32",
]


def store_embeddings(config, embedder: SentenceEmbedder, model_dir: Path) -> None:
    """What `interlingua evaluate` leaves for nearest sentences: the test split's en and fr embeddings of
    `model_dir` in <run_dir>/eval/test/embeddings."""
    from core.dataset import Dataset, file_sha256
    from evaluation import store_writer
    from evaluation.store import EmbeddingsMeta
    from orchestration.adapters import model_dir as files

    table = Dataset.open(config.data_dir).read("test", ["key", "en_text", "fr_text"]).sort_by("key")
    keys = table["key"].to_pylist()
    texts = {lang: table[f"{lang}_text"].to_pylist() for lang in ("en", "fr")}
    folder = Path(config.eval_dir) / "test" / "embeddings"
    out = store_writer.output(folder)
    staging = out.stage()
    vectors = {lang: embedder.embed(texts[lang], lang) for lang in texts}
    record = store_writer.write_block(staging.local, keys, vectors, texts)
    meta = EmbeddingsMeta(
        model=file_sha256(model_dir / files.MODEL_FILE), split="test", data=Dataset.open(config.data_dir).fingerprint
    )
    out.commit(staging, store_writer.finish(staging.local, [record], languages=["en", "fr"], meta=meta.model_dump()))


@pytest.fixture(scope="package")
def server(small_dataset, tmp_path_factory):
    """The server process, serving the champion (version 1) of a fresh registry, for the package's modules
    (one start for test_edge.py and test_server.py); stopped with SIGINT by test_server.py's last test, so a
    module that uses it sorts before test_server.py, else with SIGTERM."""
    tmp = tmp_path_factory.mktemp("serve")
    uri = store_uri(tmp)
    first = untrained_model_dir(small_dataset, tmp / "v1", decoders=["en", "fr"])  # /translate: into en and fr
    second = other_weights(untrained_model_dir(small_dataset, tmp / "v2"))
    # the lineage of a `train.compatible_with` retrain of version 1: what the replica answers as compatible_with
    # once the registry tags version 2 compatible with version 1 (test_server.py's swap)
    (second / files.LINEAGE_FILE).write_text(
        json.dumps({"compatible_with_sha256": file_sha256(first / files.MODEL_FILE)})
    )
    embedders = {"1": SentenceEmbedder.load(first), "2": SentenceEmbedder.load(second)}
    assert register(uri, first, embedders["1"]) == "1"
    (port,) = free_ports(1)
    overrides = [
        f"run_dir={tmp / 'run'}",
        f"dataset_dir={small_dataset.data_dir}",
        f"tracking.uri={uri}",
        f"registry.model_name={NAME}",
        f"serve.port={port}",
        *LIMITS,
    ]
    store_embeddings(load_config(None, overrides), embedders["1"], first)
    log = open(tmp / "server.log", "w")
    # the server's own temp folder, where what it leaves is seen: short, as Ray's socket paths under it must be
    scratch = Path(tempfile.mkdtemp(prefix="ils-"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestration.cli", "serve", *overrides],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(scratch)},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: get(f"{url}/readyz")[0] == 200, 300, "the server to be ready", proc, log=tmp / "server.log")
        yield {
            "url": url,
            "limits": load_config(None, overrides).serve,
            "uri": uri,
            "data_dir": small_dataset.data_dir,
            "embedders": embedders,
            "first": first,
            "second": second,
            "proc": proc,
            "tmp": scratch,
            "stored": tmp / "run" / "eval" / "test" / "embeddings",
            "log": tmp / "server.log",
        }
    finally:
        stop(proc)
        log.close()
        shutil.rmtree(scratch, ignore_errors=True)
