"""The trained encoder as an MLflow pyfunc model: sentences and their language in, embeddings out.

    model = mlflow.pyfunc.load_model("models:/bible6-cpu@champion")
    vectors = model.predict(pd.DataFrame({"sentence": ["Dieu est amour."], "lang": ["fr"]}))  # (1, D)

The model directory (model.pt, spm.model, config.yaml) travels inside the
MLflow model as an artifact; `orchestration.serve.embedder.SentenceEmbedder` does
the work, so the pyfunc gives exactly the training code's embeddings. The
interlingua package must be installed where the model is loaded.
"""
from __future__ import annotations

from typing import Any

import mlflow.pyfunc
import numpy as np


class SentenceEmbeddingModel(mlflow.pyfunc.PythonModel):
    def load_context(self, context: Any) -> None:
        from orchestration.serve.embedder import SentenceEmbedder

        self.embedder = SentenceEmbedder.load(context.artifacts["model_dir"])

    def predict(self, context, model_input, params=None):  # no type hints: MLflow would read them as a schema
        """model_input: a DataFrame (or dict of lists) with columns `sentence` and `lang`."""
        sentences = list(model_input["sentence"])
        langs = list(model_input["lang"])
        out = np.zeros((len(sentences), self.embedder.model.embedding_dim), dtype=np.float32)
        for lang in sorted(set(langs)):
            rows = [i for i, value in enumerate(langs) if value == lang]
            out[rows] = self.embedder.embed([sentences[i] for i in rows], lang)
        return out
