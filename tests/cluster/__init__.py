"""The test cluster: real servers started on this machine for the tests of running on a cluster.

An S3 server (moto), PostgreSQL with `mlflow server` in front of it, a Ray head with two worker nodes and a
Dask scheduler with two workers, the worker nodes in network namespaces of their own where the machine
allows it (`network`). Each start is bounded in time and fails naming what did not start, with its log's
tail; each is stopped and its folders removed after use. The pytest fixtures are in `fixtures`.
"""
