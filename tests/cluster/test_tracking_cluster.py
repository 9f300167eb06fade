"""Training on the test cluster's Ray nodes (worker hosts with addresses and disks of their own where the machine
allows namespaces) logs to the tracking server: the workers reach it over the network, not through a file on
the driver's host. Folders on the driver's disk are refused there, before any work: the nodes cannot see them."""
from __future__ import annotations

import re

import pytest

from core import transfer
from core.errors import Exit
from orchestration import tracking
from orchestration.cli import main
from tests.support.runs import TINY

pytestmark = pytest.mark.cluster


def test_training_workers_on_the_nodes_log_to_the_server(small_dataset, tmp_path, tracking_server, cluster_ray,
                                                         s3_env, capsys):
    import ray

    uri = tracking_server.uri
    common = [f"tracking.uri={uri}", "prepare.spm.vocab_size=2000", *TINY, "train.max_steps=10", "name=noded",
              # two workers of one CPU: the head has none, so both run on the worker nodes
              f"runtime.ray_address={cluster_ray.address}", "runtime.num_workers=2"]
    bucket = f"s3://{s3_env.bucket}/noded"
    transfer.upload_dir(small_dataset.data_dir, f"{bucket}/data", last=("manifest.json",))
    try:
        if cluster_ray.network.isolated:  # hosts of their own: the driver's folders are not theirs
            assert main(["train", f"run_dir={tmp_path / 'run'}", f"dataset_dir={small_dataset.data_dir}",
                         *common]) == Exit.USER_ERROR
            err = capsys.readouterr().err
            assert "is a path on this host, but the Ray cluster spans 3 hosts" in err and len(err.splitlines()) == 1
            assert not [p for p in (tmp_path / "run").rglob("*") if p.is_file()]  # nothing written there
        assert main(["train", f"run_dir={bucket}/run", f"dataset_dir={bucket}/data", *common]) == Exit.OK
        out = capsys.readouterr().out
    finally:
        ray.shutdown()
    run_id = re.search(r"\(MLflow run ([0-9a-f]{32})\)", out)[1]
    run = tracking.get_run(uri, run_id)
    assert run.info.status == "FINISHED" and run.data.tags[tracking.STAGE_TAG] == "train"
    assert run.data.params["runtime.num_workers"] == "2"
    assert [step for step, _ in tracking.metric_history(uri, run_id, "dev/xsim_error")] == [10]
