"""The one Ray Data embedding job that `evaluate`, `embed`, `mine` and the teacher's vectors run: a pool of
actors on any node, the model shipped to them through Ray's object store, the driver writing what they return.

    pool.py       run_actors (the pool and its progress line), ship_model / landed_model, the vectors' cells
    actors.py     the actors (a split, texts, USE, file blocks) and the driver's writers of their rows
"""
