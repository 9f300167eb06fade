"""The whole job on the test cluster, its hosts sharing nothing but the object store and the tracking
server: `interlingua run` with its run dir in the bucket, prepare on Beam's DaskRunner reading the corpus
from the bucket, training with two workers on the two Ray worker nodes (one of them killed mid-training
and brought back: training resumes from the checkpoint in the bucket), evaluation, registration and
promotion on the MLflow server; a second `run` started at the same moment from another working directory
is held off by the lock. The driver's store keys differ from the nodes' own, and reach no node."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from core import storage
from core.errors import Exit
from core.schema import dump_yaml
from orchestration.adapters import registry, tracking
from orchestration.config import load_config
from tests.support.corpus import LANGS, SMALL_BOOKS, VERSIONS
from tests.support.procs import wait_for
from tests.support.runs import TINY

pytestmark = [pytest.mark.cluster, pytest.mark.beam]
RUN_S = 540  # the whole run, at most


def start_run(cwd: Path, config: Path, env: dict[str, str], dask: str) -> subprocess.Popen:
    cwd.mkdir()
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestration.cli",
            "run",
            "-c",
            str(config),
            "--runner=DaskRunner",
            f"--dask_client_address={dask}",
        ],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_run_on_a_cluster_sharing_only_a_bucket_and_a_tracking_server(
    tmp_path, book_lines, s3_env, tracking_server, cluster_ray, cluster_dask
):
    """Slow (the whole `interlingua run` on the test cluster's nodes, which share only the bucket and the tracking
    server): what it proves is that every stage runs where no node sees another's disk, which only a run of
    every stage on those nodes shows; the cluster itself starts once for all of tests/cluster."""
    bucket = f"s3://{s3_env.bucket}"
    for lang, lines in book_lines(VERSIONS, SMALL_BOOKS).items():
        storage.write_bytes(f"{bucket}/corpus/bible.{lang}", ("\n".join(lines) + "\n").encode("utf-8"))
    run_dir = f"{bucket}/runs/e2e"
    config = tmp_path / "cluster.yaml"  # one config, as an operator would write it
    config.write_text(
        dump_yaml(
            load_config(
                None,
                [
                    "name=e2e",
                    f"run_dir={run_dir}",
                    f"tracking.uri={tracking_server.uri}",
                    "tracking.experiment=e2e",
                    f"prepare.sources=[{{kind: text, path: '{bucket}/corpus/bible.{{lang}}', languages: {LANGS}}}]",
                    "prepare.split.dev_size=40",
                    "prepare.split.test_size=40",
                    "prepare.spm.vocab_size=1500",
                    # two training workers, one on each worker node (the head has no `worker_node`)
                    f"runtime.ray_address={cluster_ray.address}",
                    "runtime.num_workers=2",
                    "runtime.train_resources={worker_node: 1}",
                    "evaluate.shards=2",
                    *TINY,
                    "train.max_steps=60",
                    "runtime.checkpoint_every_steps=10",
                    "train.eval_every_steps=20",
                ],
            ).to_dict()
        )
    )
    # the driver's keys differ from the nodes' own (the store takes any): they must never reach a node
    secret = f"driver-secret-{uuid.uuid4().hex}"
    env = {
        **os.environ,
        "PYTHONPATH": os.getcwd(),
        "RAY_AUTH_MODE": "disabled",
        "AWS_ACCESS_KEY_ID": "driver-key",
        "AWS_SECRET_ACCESS_KEY": secret,
    }
    first, second = (start_run(tmp_path / name, config, env, cluster_dask.address) for name in ("a", "b"))
    runs = {first, second}
    held_off = wait_for(lambda: next((p for p in runs if p.poll() is not None), None), 120, "the lock decided", first)
    assert held_off.returncode == Exit.ALREADY_RUNNING, held_off.stderr.read()
    assert "is held by another interlingua command" in held_off.stderr.read()
    winner = (runs - {held_off}).pop()

    # kill worker node b mid-training, once a checkpoint is in the bucket; bring it back
    wait_for(
        lambda: any(f.startswith("train/ray-") and "/checkpoint_" in f for f in storage.files(run_dir)),
        RUN_S,
        "the first checkpoint",
        winner,
    )
    cluster_ray.node("b").kill_raylet()
    cluster_ray.restart("b")
    try:
        out, err = winner.communicate(timeout=RUN_S)
    except subprocess.TimeoutExpired:
        winner.kill()
        out, err = winner.communicate()
        pytest.fail(f"the run did not finish in {RUN_S} s after node b came back; it printed last:\n{err[-6000:]}")
    assert winner.returncode == Exit.OK, err[-4000:]
    assert "promoted" in out

    found = storage.files(run_dir)
    assert "data/manifest.json" in found and "train/model/model.safetensors" in found and "train/run.json" in found
    assert "eval/test/metrics.json" in found and "eval/test/embeddings/manifest.json" in found
    ranks = [storage.read_json(f"{run_dir}/train/workers/rank-{r}.json")["ip"] for r in (0, 1)]
    assert sorted(ranks) == sorted(n.ip for n in cluster_ray.workers)  # one worker on each worker node
    trained = storage.read_json(f"{run_dir}/train/run.json")
    assert trained["done"] is True
    # the training workers on the nodes logged to the server over the network, each step once (a node was
    # killed and the training resumed: no step logged twice); once a test of its own (test_tracking_cluster.py)
    run = tracking.get_run(tracking_server.uri, trained["run_id"])
    assert run.info.status == "FINISHED" and run.data.tags[tracking.STAGE_TAG] == "train"
    assert run.data.params["runtime.num_workers"] == "2"
    assert sorted(
        step for step, _ in tracking.metric_history(tracking_server.uri, trained["run_id"], "dev/xsim_error")
    ) == [20, 40, 60]
    assert any(f.startswith("mlflow/") for f in storage.files(bucket))  # the MLflow artifacts, in the bucket
    version = registry.model_versions(tracking_server.uri, "e2e")
    assert len(version) == 1
    assert registry.champion(tracking_server.uri, "e2e").version == version[0].version
    # embed and mine on the cluster, the model, inputs and outputs in the bucket
    tools = tmp_path / "c"
    tools.mkdir()
    embed = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestration.cli",
            "embed",
            "-c",
            str(config),
            "-l",
            "fr",
            "--model",
            f"{run_dir}/train/model",
            "-i",
            f"{bucket}/corpus/bible.fr",
            "-o",
            f"{bucket}/embedded/fr",
        ],
        cwd=tools,
        env=env,
        capture_output=True,
        text=True,
    )
    assert embed.returncode == Exit.OK, embed.stderr[-3000:]
    manifest = storage.read_json(f"{bucket}/embedded/fr/manifest.json")
    assert manifest["rows"] == len(book_lines(VERSIONS, SMALL_BOOKS)["fr"]) and manifest["blocks"]
    mine = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestration.cli",
            "mine",
            "-c",
            str(config),
            f"mine.model={run_dir}/train/model",
            f"mine.output_dir={bucket}/mined",
            "mine.threshold=1.05",
            f"mine.inputs=[{{lang: fr, path: '{bucket}/corpus/bible.fr'}}, "
            f"{{lang: en, path: '{bucket}/corpus/bible.en'}}]",
        ],
        cwd=tools,
        env=env,
        capture_output=True,
        text=True,
    )
    assert mine.returncode == Exit.OK, mine.stderr[-3000:]
    assert any(f.startswith("pairs-") for f in storage.files(f"{bucket}/mined"))
    assert "manifest.json" in storage.files(f"{bucket}/mined")
    # nothing was written in any working directory
    assert [p for name in "abc" for p in (tmp_path / name).rglob("*")] == []
    # each node used its own credentials: the driver's are in no node's logs, job metadata or temp files
    nodes = [cluster_ray.head, *cluster_ray.workers, cluster_dask.scheduler, *cluster_dask.workers]
    leaked = [
        str(p) for node in nodes for p in node.scratch.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()
    ]
    assert not leaked, leaked
