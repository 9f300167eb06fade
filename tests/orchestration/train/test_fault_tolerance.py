"""Fault tolerance: on a real two-node Ray cluster on loopback, a killed worker, an interrupted and a killed
driver; a killed worker resumes at the same data position."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from model.model_file import load_model
from orchestration.adapters import tracking
from tests.support.procs import free_ports, own_output, run_to_end, wait_for
from tests.support.runs import TINY, checkpoints, store_uri

# Every wait ends on its event (a checkpoint, a worker's new pid, the command's exit) and is bounded by a multiple
# of what the test measured of this machine just before, never by a constant: on a loaded machine (two test
# processes and other work on two cores) the first checkpoint once took longer than a fixed 180 s.
SLACK = 5  # the measured time, times this: room for a machine that got busier since it was measured
FIRST_CHECKPOINT_IMPORTS = 12  # a first checkpoint: a driver, a controller and workers starting, then 10 steps


def ray_bin() -> str:
    return str(Path(sys.executable).with_name("ray"))


def import_seconds() -> float:
    """Wall seconds a fresh Python process takes on this machine, now, to import torch and Ray Train: what each
    process of a training (driver, controller, workers) does before its first step."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch, ray.train"], check=True, capture_output=True)
    return time.monotonic() - started


def seconds_per_step(train_dir: Path) -> float:
    """The training's own pace: its last checkpoint's training time (restarts excluded) over its steps."""
    last = checkpoints(train_dir)[-1]
    return last["elapsed_s"] / max(last["step"], 1)


@pytest.fixture  # stopped after its test: a second Ray instance on the machine makes Ray print errors in others
def two_node_cluster(tmp_path_factory):
    """`ray start --head` and `ray start --address=...`: two raylets, one CPU each."""
    temp_dir = f"/tmp/rt{os.getpid()}"  # short: Ray's socket paths have a length limit
    port, *node_ports = free_ports(7)
    common = ["--num-cpus=1", "--node-ip-address=127.0.0.1", "--disable-usage-stats", "--include-dashboard=false"]
    # Ray's token authentication (on by default for `ray start`), with a token for this test only
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": os.urandom(16).hex()}
    subprocess.run(
        [ray_bin(), "start", "--head", f"--port={port}", f"--temp-dir={temp_dir}", *common],
        check=True,
        env=env,
        capture_output=True,
    )
    p = iter(node_ports)
    subprocess.run(
        [
            ray_bin(),
            "start",
            f"--address=127.0.0.1:{port}",
            *common[:3],
            f"--node-manager-port={next(p)}",
            f"--object-manager-port={next(p)}",
            f"--dashboard-agent-listen-port={next(p)}",
            f"--dashboard-agent-grpc-port={next(p)}",
            f"--metrics-export-port={next(p)}",
            f"--runtime-env-agent-port={next(p)}",
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    yield f"127.0.0.1:{port}", env
    for proc in Path("/proc").glob("[0-9]*"):  # this cluster's processes only
        try:
            if temp_dir.encode() in (proc / "cmdline").read_bytes():
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


def test_training_on_two_nodes_survives_a_killed_worker_an_interrupt_and_a_killed_driver(
    small_dataset, tmp_path, two_node_cluster
):
    """One training, one encoder per language, two workers on two nodes, three drivers in turn:
    1. SIGINT to the driver: exit 130 with one line and no traceback, no model published, the MLflow run KILLED;
    2. the same command again; a worker SIGKILLed: the group restarts from the last checkpoint (FailureConfig),
       both ranks again; then the driver SIGKILLed mid-run: nothing published;
    3. the same command again: it resumes from the last checkpoint, into the same MLflow run, and finishes.
    Slow (three drivers of one 120-step training on two nodes): each failure is met by the next driver of the
    same run, so the three share one training rather than one each."""
    config_path = tmp_path / "run.yaml"
    config_path.write_text("name: two-nodes\n")
    uri = store_uri(tmp_path)
    args = [
        str(Path(sys.executable).with_name("interlingua")),
        "train",
        "-c",
        str(config_path),
        f"run_dir={tmp_path / 'run'}",
        f"dataset_dir={small_dataset.data_dir}",
        f"tracking.uri={uri}",
        "prepare.spm.vocab_size=2000",
        *TINY,
        f"runtime.ray_address={two_node_cluster[0]}",
        "runtime.num_workers=2",
        "train.max_steps=120",
        "train.early_stop_patience_evals=null",
        "model.shared_encoder=false",  # one encoder per language
    ]
    env = two_node_cluster[1]
    train_dir = tmp_path / "run" / "train"

    def start(name: str) -> subprocess.Popen:
        return subprocess.Popen(
            args, env=env, stdout=open(tmp_path / f"{name}.log", "wb"), stderr=subprocess.PIPE, text=True
        )

    first_bound = SLACK * FIRST_CHECKPOINT_IMPORTS * import_seconds()
    started = time.monotonic()
    driver = start("first")
    try:
        wait_for(lambda: checkpoints(train_dir), first_bound, "the first checkpoint", driver)
        first_s = time.monotonic() - started  # a driver's start to its first checkpoint: each later wait's unit
        driver.send_signal(signal.SIGINT)
        _, err = driver.communicate(timeout=SLACK * first_s)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 130, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("interlingua")]
    assert lines == [
        "interlingua train: interrupted; nothing half-done was published; "
        "the same command resumes from the last checkpoint"
    ], err[-3000:]
    assert "Traceback" not in own_output(err) and not (train_dir / "model").exists()
    run_id = json.loads((train_dir / "run.json").read_text())["run_id"]
    assert tracking.get_run(uri, run_id).info.status == "KILLED"
    # read once the driver is gone: it may report another checkpoint between the one seen and the SIGINT
    interrupted_at = checkpoints(train_dir)[-1]["step"]
    first_worker = json.loads((train_dir / "workers" / "rank-1.json").read_text())["pid"]

    def second_worker() -> int | None:
        pid = json.loads((train_dir / "workers" / "rank-1.json").read_text())["pid"]
        return pid if pid != first_worker else None

    driver = start("second")
    try:
        wait_for(
            lambda: [c for c in checkpoints(train_dir) if c["step"] > interrupted_at],
            SLACK * first_s,
            "a checkpoint after the interrupt",
            driver,
        )
        os.kill(wait_for(second_worker, SLACK * first_s, "the second driver's rank 1", driver), signal.SIGKILL)
        resumed = wait_for(
            lambda: [c for c in checkpoints(train_dir) if len(c["history"]) >= 2],
            SLACK * first_s,
            "a checkpoint after the killed worker",
            driver,
        )
        assert (
            resumed[-1]["history"][-1]["world"] == 2 and resumed[-1]["history"][-1]["resumed_at_step"] > interrupted_at
        )
        killed_at = resumed[-1]["step"]
        driver.send_signal(signal.SIGKILL)  # the whole job dies mid-run
        driver.wait(SLACK * first_s)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert not (train_dir / "model").exists()

    # a driver's start, then the steps left at the training's own measured pace
    rerun = run_to_end(args, SLACK * (first_s + (120 - killed_at) * seconds_per_step(train_dir)), env=env)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    progress = json.loads((train_dir / "model" / "progress.json").read_text())
    assert progress["step"] == 120 and progress["done"]
    resumes = [h["resumed_at_step"] for h in progress["history"]]
    assert len(resumes) >= 3 and resumes[-1] >= killed_at  # each driver started from the last checkpoint
    state = json.loads((train_dir / "run.json").read_text())
    assert state["run_id"] == run_id and tracking.get_run(uri, run_id).info.status == "FINISHED"
    steps = [s for s, _ in tracking.metric_history(uri, run_id, "dev/xsim_error")]
    assert steps[-1] == 120 and steps[0] == 10
    for key in ("dev/xsim_error", "train/loss"):  # three attempts, each step's metrics logged once
        logged = [s for s, _ in tracking.metric_history(uri, run_id, key)]
        assert len(logged) == len(set(logged)), (key, sorted(logged))
    assert len(tracking.search_runs(uri, "interlingua")) == 1  # resumed into the same MLflow run, not a duplicate
    model, meta = load_model(str(train_dir / "model" / "model.safetensors"))
    assert meta.dev_error == progress["dev_error"]
    assert isinstance(model.encoders["fr"].lstm, torch.nn.LSTM)


# --- a killed worker resumes at the same data position --------------------------------------------


def final_state(train_dir: Path) -> dict:
    """The training state of the last checkpoint Ray registered."""
    snapshot = json.loads((train_dir / "ray" / "checkpoint_manager_snapshot.json").read_text())
    last = max(snapshot["checkpoint_results"], key=lambda r: r["metrics"]["step"])
    return torch.load(train_dir / "ray" / last["checkpoint_dir_name"] / "state.pt", weights_only=True)


def test_a_worker_killed_mid_epoch_resumes_at_the_same_data_position(small_dataset, tmp_path, local_ray):
    """The same run with and without a killed worker sees the same batches and ends with the same weights:
    the stream resumes at the checkpoint's data position (windows of 60 tuples: mid-epoch, mid-window),
    also when the killed run's batches are built ahead by a worker process (runtime.prefetch_batches).
    The killed run's command runs with -v: its output holds the workers' step lines (once a second training
    of test_output.py), without colour codes. Slow (two 120-step trainings, one killed): the same weights are
    only seen against a run of the same config that was not killed."""
    import ray

    from orchestration.train.driver import train
    from tests.support.runs import config_for

    overrides = [
        "train.max_steps=120",
        "train.early_stop_patience_evals=null",
        "model.dropout=0.0",
        "train.window_tuples=60",
        "model.ranking_weight=1.0",
        "runtime.max_failures=2",
    ]
    straight = config_for(small_dataset, tmp_path / "straight", *overrides)
    started = time.monotonic()
    train(straight)
    straight_s = time.monotonic() - started  # the whole training on this machine, now: the waits' unit below

    run_dir = tmp_path / "killed" / "run"
    args = [
        str(Path(sys.executable).with_name("interlingua")),
        "-v",
        "train",
        f"run_dir={run_dir}",
        f"dataset_dir={small_dataset.data_dir}",
        f"tracking.uri=sqlite:///{tmp_path / 'killed.db'}",
        "prepare.spm.vocab_size=2000",
        *TINY,
        *overrides,
        "runtime.prefetch_batches=2",  # batches built ahead by a worker process: the same batches
        f"runtime.ray_address={ray.get_runtime_context().gcs_address}",
    ]
    train_dir = run_dir / "train"
    driver = subprocess.Popen(args, stdout=open(tmp_path / "killed.log", "wb"), stderr=subprocess.STDOUT)
    try:
        # the same training in a command of its own: its first checkpoint comes before the whole training's time
        # in this process (plus the command's own start), its end after at most that time again
        wait_for(
            lambda: checkpoints(train_dir),
            SLACK * straight_s,
            "the first checkpoint",
            driver,
            log=tmp_path / "killed.log",
        )
        worker = json.loads((train_dir / "workers" / "rank-0.json").read_text())["pid"]
        os.kill(worker, signal.SIGKILL)
        wait_for(
            lambda: driver.poll() is not None,
            SLACK * straight_s,
            "the end of the killed run",
            log=tmp_path / "killed.log",
        )
        assert driver.returncode == 0, (tmp_path / "killed.log").read_text()[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()
    printed = (tmp_path / "killed.log").read_text()
    assert "\x1b[" not in printed  # a log file is no terminal
    # -v: rank 0's line every 5 steps (runtime.log_every_steps), its loss columns those in use (no NMT column)
    columns = re.findall(r"step \d+/120 loss [\d.]+ (\S+)", printed)
    assert "step 120/120 loss" in printed and set(columns) == {"ranking"}, printed[-3000:]
    killed, clean = final_state(train_dir), final_state(Path(straight.train_dir))
    resumes = [h["resumed_at_step"] for h in killed["progress"]["history"]]
    assert resumes and 0 < resumes[0] < 120  # it was killed and resumed mid-run
    assert killed["progress"]["step"] == clean["progress"]["step"] == 120
    assert killed["progress"]["data"] == clean["progress"]["data"]
    assert killed["progress"]["data"]["epoch"] >= 1  # several epochs, several windows each
    assert killed["progress"]["data_digest"] == clean["progress"]["data_digest"]  # the same batches, in order
    for name, tensor in clean["model"].items():
        assert torch.equal(killed["model"][name], tensor), name
