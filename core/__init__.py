"""The Beam-free core that every stage builds on: errors and exit codes, storage, the dataset format.

Imports only the standard library, numpy and pyarrow: `model/`, `evaluation/`
and the served model import it without Apache Beam or Ray.
"""
