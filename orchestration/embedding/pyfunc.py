"""The trained encoder as an MLflow pyfunc model: sentences and their language in, embeddings out.

    model = mlflow.pyfunc.load_model("models:/bible6-cpu@champion")
    vectors = model.predict(pd.DataFrame({"sentence": ["Dieu est amour."], "lang": ["fr"]}))  # (1, D)

The model directory (model.safetensors, spm.model, config.yaml) travels inside the
MLflow model as an artifact; `orchestration.embedding.embedder.SentenceEmbedder` does
the work, so the pyfunc gives exactly the training code's embeddings. The
project travels with it too, as a wheel in the model's `code/` folder that its
requirements.txt names, beside the pinned `REQUIREMENTS`
(`lifecycle.packaging.log_model`): MLflow's environment managers install both.

MLflow logs this file as the model's code (models from code: nothing is
pickled); `set_model` at the end names the model it defines.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mlflow.models
import numpy as np
import pandas as pd

# the class itself, not `mlflow.pyfunc.PythonModel`: mlflow's __init__ binds `pyfunc` to a lazy loader, which
# hides the submodule's names from a type checker
from mlflow.pyfunc import PythonModel

# The third-party distributions imported when the model loads (`orchestration.embedding.embedder` and what it
# imports: the Beam-free `core`, `model`), pinned at logging time to the versions installed then; neither
# Apache Beam nor Ray (tests/orchestration/test_imports.py). mlflow pins itself.
REQUIREMENTS = ("torch", "safetensors", "sentencepiece", "numpy", "pandas", "PyYAML", "pydantic", "regex", "pyarrow")


class SentenceEmbeddingModel(PythonModel):
    def load_context(self, context: Any) -> None:
        from orchestration.embedding.embedder import SentenceEmbedder

        self.embedder = SentenceEmbedder.load(context.artifacts["model_dir"])

    def predict(
        self, context: Any, model_input: pd.DataFrame, params: Mapping[str, object] | None = None
    ) -> np.ndarray:
        """model_input: a DataFrame with columns `sentence` and `lang`; returns (N, D) float32."""
        sentences = list(model_input["sentence"])
        langs = list(model_input["lang"])
        out = np.zeros((len(sentences), self.embedder.model.embedding_dim), dtype=np.float32)
        for lang in sorted(set(langs)):
            rows = [i for i, value in enumerate(langs) if value == lang]
            out[rows] = self.embedder.embed([sentences[i] for i in rows], lang)
        return out


mlflow.models.set_model(SentenceEmbeddingModel())
