"""The adapters every stage uses: each the one place for its concern, importing no stage.

tracking.py        every MLflow call; tracker.py: the store a config names, `with tracker.run(...) as run`
                   (a TrackedRun: what a stage logs to); registry.py: the registry's versions and aliases
model_dir.py       the exported model directory as an output (ModelKind), the training run beside it;
                   model_reading.py: the one model loader and tokenizer
state.py           a stage's state file (what a rerun skips)
lock.py            the run lock: flock, or a lease object at an s3:// run dir across hosts (lease.py,
                   holder.py, worker_fence.py)
cluster.py         the one Ray start, the per-node checks, the object store's shipping
logs.py            the one logging setup: what -v and --quiet show; native_stderr.py: Ray's C++ line held back
progress.py        the one progress line
ray_private.py     every use of Ray's private attributes, each checked against the installed Ray
"""
