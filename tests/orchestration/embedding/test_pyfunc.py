"""The registered MLflow pyfunc model on its own: logged with the project's wheel, installed from its own
requirements into a fresh virtualenv without the checkout, loaded there, same embeddings. And the HTTP
server's code where neither Apache Beam nor faiss is installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import mlflow
import numpy as np
import pytest

from orchestration.adapters import tracking
from orchestration.embedding.embedder import SentenceEmbedder
from orchestration.lifecycle import packaging
from tests.support.runs import untrained_model_dir

pytestmark = pytest.mark.venv

OURS = ("interlingua", "__editable__", "orchestration", "pipelines", "model", "evaluation")


def fresh_venv(folder: Path, without: tuple[str, ...] = ()) -> Path:
    """A new virtualenv that sees this environment's third-party packages (no downloads) but not the
    project: a .pth names a folder of links to every site-packages entry except the project's own (and
    those whose names start with one of `without`)."""
    subprocess.run([sys.executable, "-m", "venv", str(folder / "venv")], check=True, timeout=120)
    shared = folder / "shared"
    shared.mkdir()
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        if not entry.name.startswith(OURS + without):
            (shared / entry.name).symlink_to(entry)
    site = Path(
        subprocess.run(
            [str(folder / "venv" / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "shared.pth").write_text(f"{shared}\n")  # a plain path: the .pth files inside are not run
    return folder / "venv"


def test_the_pyfunc_model_installs_in_a_fresh_venv_and_embeds_as_the_training_code_does(small_dataset, tmp_path, verse):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    model_dir = untrained_model_dir(small_dataset, tmp_path / "model")
    run = tracking.start_run(uri, "exp", "train", {})
    embedder = SentenceEmbedder.load(model_dir)
    info = packaging.log_model(uri, run, model_dir, embedder.model.embedding_dim)

    mlflow.set_tracking_uri(uri)
    local = Path(mlflow.artifacts.download_artifacts(artifact_uri=info.model_uri, dst_path=str(tmp_path / "dl")))
    requirements = (local / "requirements.txt").read_text().split()
    (wheel,) = local.glob("code/interlingua-*.whl")
    assert f"code/{wheel.name}" in requirements
    assert {r.split("==")[0] for r in requirements if "==" in r} >= {
        "mlflow",
        "torch",
        "sentencepiece",
        "numpy",
        "pandas",
        "PyYAML",
        "pydantic",
        "regex",
    }

    venv = fresh_venv(tmp_path / "env")
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # what MLflow's environment managers do, in the model's folder; the pins are met by the shared packages
    installed = subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--no-index",
            "--no-deps",
            "-q",
            "--disable-pip-version-check",
            "-r",
            "requirements.txt",
        ],
        cwd=local,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]

    sentences = [verse("k", 8, 1, 1), verse("l", 8, 1, 1), verse("k", 8, 1, 2)]  # Ruth 1:1 en, fr; 1:2 en
    langs = ["en", "fr", "en"]
    script = (
        "import json, mlflow, pandas as pd\n"
        f"mlflow.set_tracking_uri({uri!r})\n"
        f"m = mlflow.pyfunc.load_model({info.model_uri!r})\n"
        f"out = m.predict(pd.DataFrame({{'sentence': {sentences!r}, 'lang': {langs!r}}}))\n"
        "import orchestration, orchestration.embedding.embedder as e\n"
        "print(json.dumps({'code': [orchestration.__file__, e.__file__], 'out': out.tolist()}))\n"
    )
    elsewhere = tmp_path / "elsewhere"  # not the checkout, so '' on sys.path finds no project code
    elsewhere.mkdir()
    out = subprocess.run([python, "-c", script], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    for path in got["code"]:  # the wheel's code, installed in the venv, not the checkout
        assert Path(path).resolve().is_relative_to(venv.resolve()), path
    loaded = np.array(got["out"])
    expected = np.stack([embedder.embed([s], lang)[0] for s, lang in zip(sentences, langs)])
    assert loaded.shape == (3, embedder.model.embedding_dim)
    np.testing.assert_allclose(loaded, expected, rtol=1e-5, atol=1e-6)  # rows keep their order across languages


def test_the_server_loads_and_embeds_where_neither_apache_beam_nor_faiss_is_installed(small_dataset, tmp_path, verse):
    """The project's wheel (without its dependencies: its metadata still names the training stack) in a
    virtualenv that lacks apache-beam and faiss: the deployment module imports, and its model source loads a
    model directory and embeds as here."""
    model_dir = untrained_model_dir(small_dataset, tmp_path / "model")
    venv = fresh_venv(tmp_path / "env", without=("apache_beam", "faiss"))
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    wheel = packaging.build_project_wheel(tmp_path / "wheel")
    installed = subprocess.run(
        [python, "-m", "pip", "install", "--no-index", "--no-deps", "-q", "--disable-pip-version-check", str(wheel)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    sentence = verse("l", 8, 1, 1)
    script = (
        "import importlib.util, json\n"
        "assert importlib.util.find_spec('apache_beam') is None and importlib.util.find_spec('faiss') is None\n"
        "from orchestration.config import load_config\n"
        "from orchestration.serve import app\n"
        "from orchestration.serve.models import ModelSource\n"
        f"config = load_config(None, ['serve.model={model_dir}', 'run_dir={tmp_path / 'run'}'])\n"
        "source = ModelSource(config)\n"
        "served = source.load(source.current_version())\n"
        f"print(json.dumps({{'code': app.__file__, 'out': served.embedder.embed([{sentence!r}], 'fr').tolist()}}))\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = subprocess.run([python, "-c", script], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(got["code"]).resolve().is_relative_to(venv.resolve())
    expected = SentenceEmbedder.load(model_dir).embed([sentence], "fr")
    np.testing.assert_allclose(np.array(got["out"]), expected, rtol=1e-5, atol=1e-6)
