"""Training on the test cluster's Ray nodes (worker hosts with addresses of their own where the machine
allows network namespaces) logs to the tracking server: the workers reach it over the network, not through
a file on the driver's host. The run folder is local, on the filesystem the nodes share here."""
from __future__ import annotations

import re

import pytest

from core.errors import Exit
from orchestration import tracking
from orchestration.cli import main
from tests.support.runs import TINY

pytestmark = pytest.mark.cluster


def test_training_workers_on_the_nodes_log_to_the_server(small_dataset, tmp_path, tracking_server, cluster_ray,
                                                         capsys):
    import ray

    uri = tracking_server.uri
    overrides = [f"run_dir={tmp_path / 'run'}", f"dataset_dir={small_dataset.data_dir}", f"tracking.uri={uri}",
                 "prepare.spm.vocab_size=2000", *TINY, "train.max_steps=10", "name=noded",
                 # two workers of one CPU: the head has one CPU, so at least one runs on a worker node
                 f"runtime.ray_address={cluster_ray.address}", "runtime.num_workers=2"]
    try:
        assert main(["train", *overrides]) == Exit.OK
        out = capsys.readouterr().out
    finally:
        ray.shutdown()
    run_id = re.search(r"\(MLflow run ([0-9a-f]{32})\)", out)[1]
    run = tracking.get_run(uri, run_id)
    assert run.info.status == "FINISHED" and run.data.tags[tracking.STAGE_TAG] == "train"
    assert run.data.params["runtime.num_workers"] == "2"
    assert [step for step, _ in tracking.metric_history(uri, run_id, "dev/xsim_error")] == [10]
