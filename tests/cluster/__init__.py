"""The tests of running on a cluster: real servers started on this machine (tests/support: an S3 server, PostgreSQL
with `mlflow server` in front of it, a Ray head with two worker nodes and a Dask scheduler with two workers), the
worker nodes in network namespaces of their own where the machine allows it."""
