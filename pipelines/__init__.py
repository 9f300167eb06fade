"""Apache Beam jobs that turn N-way parallel corpora into BPE-encoded Parquet shards."""
