"""The shared embedding layer: the trained encoder on raw text, and the one Ray Data embedding job that
`evaluate`, `embed` and `mine` run; `interlingua search` and the MLflow pyfunc model. The HTTP server
(`orchestration.serve`) and the registry (`orchestration.lifecycle`) build on it; it imports neither.

    embedder.py   SentenceEmbedder: a model directory -> embeddings of raw sentences
    backends.py   which engine runs the encoder: torch, ONNX Runtime fp32 or int8
    export.py     `export`: the encoder as ONNX graphs beside the model directory
    job.py        the one Ray Data embedding job: run_actors, the model shipped to its actors
    actors.py     its actors (split, texts, USE, file blocks) and the driver's writers of their rows
    inputs.py     the inputs of `embed` and `mine`: text and Parquet files, checked and cut into blocks
    corpus.py     `embed`: a Ray Data job, `evaluation.store` blocks, resumable (or small inputs in-process)
    nearest.py    `search`: nearest sentences of the evaluation split to a query (its stored embeddings)
    pyfunc.py     the registered MLflow model (sentences and languages in, embeddings out)
"""
