"""The trained encoder used on raw text: `interlingua embed`, `interlingua search`, the MLflow pyfunc model.

    embedder.py   SentenceEmbedder: a model directory -> embeddings of raw sentences
    nearest.py    nearest sentences of a split to a query; embedding a file line by line
    pyfunc.py     the registered MLflow model (sentences and languages in, embeddings out)
"""
