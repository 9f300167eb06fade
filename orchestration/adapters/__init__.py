"""The adapters every stage uses: each the one place for its concern, importing no stage.

tracking.py    every MLflow call (`with tracking.run(...)`), the registry's versions and aliases
model_dir.py   the exported model directory, the one model loader, the training run beside it
state.py       a stage's state file (what a rerun skips)
lock.py        the run lock: flock, or a lease object at an s3:// run dir across hosts
cluster.py     the one Ray start, the per-node checks, the object store's shipping
logs.py        the one logging setup: what -v and --quiet show
progress.py    the one progress line
"""
