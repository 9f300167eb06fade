"""The embedding layer: the trained encoder on raw text, on any engine, and the inputs it reads. Every stage
that embeds builds on it (`orchestration.batch`'s Ray Data job, `embed`, `search`, `evaluate`, `mine`,
`serve`, the registered model); it imports none of them.

    embedder.py   SentenceEmbedder: a model directory -> embeddings of raw sentences
    backends.py   which engine runs the encoder: torch, ONNX Runtime fp32 or int8
    export.py     `interlingua export`: the encoder as ONNX graphs beside the model directory
    inputs.py     the inputs of `embed` and `mine`: text and Parquet files, checked and cut into blocks
    pyfunc.py     the registered MLflow model (sentences and languages in, embeddings out)
"""
