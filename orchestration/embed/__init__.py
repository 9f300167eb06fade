"""The `embed`, `translate` and `search` commands, on the embedding layer (`orchestration.embedding`) and its Ray
Data job (`orchestration.batch`).

    corpus.py     `embed`: a Ray Data job, `evaluation.store` blocks, resumable (or small inputs in-process)
    blocks.py     its blocks: which are done, the staging of a --force, the actors' run
    folder.py     its output folder (`EmbedKind`): EmbedMeta, its manifest's section, which files are its own
    translate_file.py   `translate -o FILE.txt`: lines or stored vectors translated in this process
    translate_corpus.py `translate -o DIR`: a Ray Data job, text blocks, resumable
    search.py     `search`: nearest sentences of the evaluation split to a query (its stored embeddings)
"""
