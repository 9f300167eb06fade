"""The trained encoder used on raw text: `interlingua embed`, `interlingua search`, the MLflow pyfunc model.

    embedder.py   SentenceEmbedder: a model directory -> embeddings of raw sentences
    inputs.py     the inputs of `embed`: text and Parquet files, checked and cut into blocks
    corpus.py     `embed`: a Ray Data job, blocks on disk + manifest.json, resumable (or small inputs in-process)
    nearest.py    `search`: nearest sentences of the evaluation split to a query (its stored embeddings)
    pyfunc.py     the registered MLflow model (sentences and languages in, embeddings out)
"""
