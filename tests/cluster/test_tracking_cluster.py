"""Training on the test cluster's Ray nodes (worker hosts with addresses and disks of their own where the machine
allows namespaces): folders on the driver's disk are refused there, before any work, as the nodes cannot see
them. That the workers log to the tracking server over the network is asserted by the end-to-end test."""

from __future__ import annotations

import pytest

from core.errors import Exit
from orchestration.cli import main
from tests.support.runs import TINY

pytestmark = pytest.mark.cluster


def test_a_folder_on_the_drivers_host_is_refused_before_any_work(
    small_dataset, tmp_path, tracking_server, cluster_ray, capsys
):
    """What the training on the nodes logs to the server, once asserted here by a training of its own, is
    asserted by the end-to-end test (test_end_to_end.py), on the same nodes and server."""
    import ray

    if not cluster_ray.network.isolated:
        pytest.skip(f"the test cluster's nodes share this host's disk here: {cluster_ray.network.why_not}")
    common = [
        f"tracking.uri={tracking_server.uri}",
        "prepare.spm.vocab_size=2000",
        *TINY,
        "train.max_steps=10",
        "name=noded",
        f"runtime.ray_address={cluster_ray.address}",
        "runtime.num_workers=2",
    ]
    try:
        assert (
            main(["train", f"run_dir={tmp_path / 'run'}", f"dataset_dir={small_dataset.data_dir}", *common])
            == Exit.USER_ERROR
        )
    finally:
        ray.shutdown()
    err = capsys.readouterr().err
    assert "is a path on this host, but the Ray cluster spans 3 hosts" in err and len(err.splitlines()) == 1
    assert not [p for p in (tmp_path / "run").rglob("*") if p.is_file()]  # nothing written there
