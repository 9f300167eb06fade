"""The registered MLflow pyfunc model on its own: logged, loaded in a fresh process, same embeddings."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from orchestration import tracking
from orchestration.serve.embedder import SentenceEmbedder
from tests.orchestration.helpers import untrained_model_dir

pytestmark = pytest.mark.slow


def test_the_pyfunc_model_embeds_as_the_training_code_does_in_a_fresh_process(small_dataset, tmp_path, verse):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    model_dir = untrained_model_dir(small_dataset, tmp_path / "model")
    run = tracking.start_run(uri, "exp", "train", {})
    embedder = SentenceEmbedder.load(model_dir)
    info = tracking.log_pyfunc_model(uri, run, model_dir, embedder.model.embedding_dim)
    sentences = [verse("k", 8, 1, 1), verse("l", 8, 1, 1), verse("k", 8, 1, 2)]  # Ruth 1:1 en, fr; 1:2 en
    langs = ["en", "fr", "en"]
    script = (
        "import json, mlflow, pandas as pd\n"
        f"mlflow.set_tracking_uri({uri!r})\n"
        f"m = mlflow.pyfunc.load_model({info.model_uri!r})\n"
        f"print(json.dumps(m.predict(pd.DataFrame({{'sentence': {sentences!r}, 'lang': {langs!r}}})).tolist()))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = np.array(json.loads(out.stdout.strip().splitlines()[-1]))
    expected = np.stack([embedder.embed([s], lang)[0] for s, lang in zip(sentences, langs)])
    assert loaded.shape == (3, embedder.model.embedding_dim)
    np.testing.assert_allclose(loaded, expected, rtol=1e-5, atol=1e-6)  # rows keep their order across languages
