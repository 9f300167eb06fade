"""`interlingua train` with Ray Train on real Bible text: checkpoints, resume, faults, MLflow."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from model.nmt import load_model
from orchestration import tracking
from orchestration.config import load_config
from orchestration.recipe import Window
from orchestration.train import TrainError, _export, train

TINY = [
    "model.embed_dim=16", "model.encoder_hidden=16", "model.decoder_hidden=16",
    "train.log_every_steps=5", "train.eval_every_steps=10", "train.checkpoint_every_steps=10",
    "train.dev_max_sentences=40",
]


def config_for(small_dataset, tmp_path: Path, *overrides: str):
    return load_config(None, [
        f"run_dir={tmp_path / 'run'}",
        f"dataset_dir={small_dataset.data_dir}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        "prepare.spm.vocab_size=2000",
        *TINY, *overrides,
    ])


@pytest.fixture(scope="module")
def local_ray():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


def test_train_checkpoints_exports_and_logs_to_mlflow(small_dataset, tmp_path, local_ray):
    config = config_for(small_dataset, tmp_path, "train.max_steps=20", "model.ranking_weight=1.0")
    result = train(config)
    assert not result.skipped and result.step == 20
    model, meta = load_model(str(result.model_dir / "model.pt"))
    assert meta["dev_error"] == result.dev_error and 0.0 <= result.dev_error < 1.0
    assert {p.name for p in result.model_dir.iterdir()} >= {"model.pt", "spm.model", "config.yaml", "progress.json"}
    assert load_config(result.model_dir / "config.yaml").model == config.model  # reproducible from it
    assert model.embedding_dim == 32

    uri = config.tracking.uri
    run = tracking.get_run(uri, result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["model.encoder"] == "blstm_max" and run.data.params["train.max_steps"] == "20"
    for key in ("train/loss", "train/tokens_per_s", "train/cpu_cores", "train/ppl/en", "dev/xsim_error",
                "dev/xsim_error/fr-en"):
        assert key in run.data.metrics, key
    assert 0 < run.data.metrics["train/cpu_cores"] <= 1.05 * os.cpu_count()
    assert [s for s, _ in tracking.metric_history(uri, result.run_id, "dev/xsim_error")] == [10, 20]
    artifacts = {a.path for a in tracking._client(uri).list_artifacts(result.run_id, "model")}
    assert "model/model.pt" in artifacts and "model/spm.model" in artifacts

    again = train(config)  # the same run again: nothing to do
    assert again.skipped and again.run_id == result.run_id
    with pytest.raises(TrainError, match="another dataset or model/train config"):
        train(config_for(small_dataset, tmp_path, "train.max_steps=20", "train.lr=0.01"))


def test_window_metrics_count_tokens_and_the_cpu_time_of_the_process():
    window = Window(["en", "fr"])
    out = {"nll": {"fr": torch.tensor(6.0)}, "tokens": {"fr": torch.tensor(3)}, "loss": torch.tensor(2.0),
           "ranking": None}
    time.sleep(0.3)  # waiting costs no CPU
    window.add(out, input_tokens=5)
    idle = window.metrics(torch.device("cpu"))
    assert idle["train/loss"] == 2.0 and idle["train/nll_per_token"] == 2.0
    assert 0 < idle["train/tokens_per_s"] <= 8 / 0.3 and idle["train/cpu_cores"] < 0.2
    assert set(idle) == {"train/loss", "train/nll_per_token", "train/tokens_per_s", "train/cpu_cores",
                         "train/ppl/fr"}
    window.reset()
    until = time.monotonic() + 0.3
    while time.monotonic() < until:  # one busy thread: about one core
        pass
    busy = window.metrics(torch.device("cpu"))
    assert 0.3 < busy["train/cpu_cores"] <= 1.05 and busy["train/tokens_per_s"] == 0


def test_a_failed_training_is_marked_failed(small_dataset, tmp_path, local_ray):
    # M:N with 7 sources cannot be formed from 6 languages: the workers fail
    config = config_for(small_dataset, tmp_path, "train.paths=[{kind: 'M:N', m: 7}]", "train.max_failures=0")
    with pytest.raises(Exception, match="no training batch"):
        train(config)
    state = json.loads((config.train_dir / "run.json").read_text())
    assert tracking.get_run(config.tracking.uri, state["run_id"]).info.status == "FAILED"


def test_bad_language_in_a_path_is_rejected_before_training(small_dataset, tmp_path):
    config = config_for(small_dataset, tmp_path, "train.paths=[{kind: '1:1', targets: [de]}]")
    with pytest.raises(Exception, match=r"train.paths.0.targets: \['de'\] not among"):
        train(config)


# --- a real two-node Ray cluster on loopback, a killed worker and a killed driver -----------------

def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def ray_bin() -> str:
    return str(Path(sys.executable).with_name("ray"))


@pytest.fixture(scope="module")
def two_node_cluster(tmp_path_factory):
    """`ray start --head` and `ray start --address=...`: two raylets, one CPU each."""
    temp_dir = f"/tmp/rt{os.getpid()}"  # short: Ray's socket paths have a length limit
    port, *node_ports = free_ports(7)
    common = ["--num-cpus=1", "--node-ip-address=127.0.0.1", "--disable-usage-stats", "--include-dashboard=false"]
    # Ray's token authentication (on by default for `ray start`), with a token for this test only
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": os.urandom(16).hex()}
    subprocess.run([ray_bin(), "start", "--head", f"--port={port}", f"--temp-dir={temp_dir}", *common],
                   check=True, env=env, capture_output=True)
    p = iter(node_ports)
    subprocess.run([
        ray_bin(), "start", f"--address=127.0.0.1:{port}", *common[:3],
        f"--node-manager-port={next(p)}", f"--object-manager-port={next(p)}",
        f"--dashboard-agent-listen-port={next(p)}", f"--dashboard-agent-grpc-port={next(p)}",
        f"--metrics-export-port={next(p)}", f"--runtime-env-agent-port={next(p)}",
    ], check=True, env=env, capture_output=True)
    yield f"127.0.0.1:{port}", env
    for proc in Path("/proc").glob("[0-9]*"):  # this cluster's processes only
        try:
            if temp_dir.encode() in (proc / "cmdline").read_bytes():
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


def checkpoints(train_dir: Path) -> list[dict]:
    """Progress of the checkpoints Ray has registered (those a restart resumes from), by step."""
    found = []
    try:
        snapshot = json.loads((train_dir / "ray" / "checkpoint_manager_snapshot.json").read_text())
        for result in snapshot["checkpoint_results"]:
            found.append(json.loads((train_dir / "ray" / result["checkpoint_dir_name"] / "progress.json").read_text()))
    except (OSError, json.JSONDecodeError, KeyError):
        pass  # not written yet, or being replaced
    return sorted(found, key=lambda p: p["step"])


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"training exited ({proc.returncode}) before {what}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_two_workers_on_two_nodes_survive_a_killed_worker_and_resume_after_a_killed_driver(
    small_dataset, tmp_path, two_node_cluster
):
    config_path = tmp_path / "run.yaml"
    config_path.write_text("name: two-nodes\n")
    args = [
        str(Path(sys.executable).with_name("interlingua")), "train", "-c", str(config_path),
        f"run_dir={tmp_path / 'run'}", f"dataset_dir={small_dataset.data_dir}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", "prepare.spm.vocab_size=2000", *TINY,
        f"train.ray_address={two_node_cluster[0]}", "train.num_workers=2", "train.max_steps=300",
        "train.early_stop_patience_evals=null",
    ]
    env = two_node_cluster[1]
    train_dir = tmp_path / "run" / "train"
    log = open(tmp_path / "train.log", "wb")
    driver = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: checkpoints(train_dir), 180, "the first checkpoint", driver)
        worker = json.loads((train_dir / "workers" / "rank-1.json").read_text())["pid"]
        os.kill(worker, signal.SIGKILL)  # FailureConfig: the group restarts from the checkpoint
        resumed = wait_for(
            lambda: [c for c in checkpoints(train_dir) if c["history"]], 180, "a resumed checkpoint", driver
        )
        assert resumed[0]["history"][0]["world"] == 2 and resumed[0]["history"][0]["resumed_at_step"] >= 10
        killed_at = wait_for(
            lambda: [c["step"] for c in checkpoints(train_dir) if c["step"] >= 60], 180, "step 60", driver
        )[-1]
        driver.send_signal(signal.SIGKILL)  # the whole job dies mid-run
        driver.wait(30)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert not (train_dir / "model").exists()

    rerun = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    progress = json.loads((train_dir / "model" / "progress.json").read_text())
    assert progress["step"] == 300 and progress["done"]
    resumes = [h["resumed_at_step"] for h in progress["history"]]
    assert len(resumes) >= 2 and resumes[-1] >= killed_at  # the rerun started from its last checkpoint

    state = json.loads((train_dir / "run.json").read_text())
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = tracking.get_run(uri, state["run_id"])
    assert run.info.status == "FINISHED"
    steps = [s for s, _ in tracking.metric_history(uri, state["run_id"], "dev/xsim_error")]
    assert steps[-1] == 300 and steps[0] == 10
    runs = tracking._client(uri).search_runs([run.info.experiment_id])
    assert len(runs) == 1  # resumed into the same MLflow run, not a duplicate
    model, meta = load_model(str(train_dir / "model" / "model.pt"))
    assert meta["dev_error"] == progress["dev_error"]
    assert isinstance(model.encoders["fr"].lstm, torch.nn.LSTM)


def test_disk_full_while_exporting_the_model_keeps_the_previous_model(tmp_path, monkeypatch):
    import shutil

    from ray.train import Checkpoint

    checkpoint_dir = tmp_path / "checkpoint"
    checkpoint_dir.mkdir()
    for name, text in {"model.pt": "new weights", "spm.model": "new spm", "config.yaml": "name: new",
                       "progress.json": json.dumps({"step": 20, "dev_error": 0.5}), "state.pt": "optimizer"}.items():
        (checkpoint_dir / name).write_text(text)
    model_dir = tmp_path / "train" / "model"
    model_dir.mkdir(parents=True)
    old = {"model.pt": "old weights", "spm.model": "old spm", "config.yaml": "name: old"}
    for name, text in old.items():
        (model_dir / name).write_text(text)

    copies = []
    real_copy = shutil.copyfile  # what copytree's copy2 calls for the bytes

    def disk_fills(src, dst, **kwargs):
        copies.append(src)
        if len(copies) == 2:
            raise OSError(28, "No space left on device", str(dst))
        return real_copy(src, dst, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", disk_fills)
    with pytest.raises(OSError, match="No space left on device"):
        _export(Checkpoint.from_directory(str(checkpoint_dir)), model_dir)
    assert {p.name: p.read_text() for p in model_dir.iterdir()} == old  # the previous model, whole

    monkeypatch.setattr(shutil, "copyfile", real_copy)  # space freed: the rerun's export replaces it
    meta = _export(Checkpoint.from_directory(str(checkpoint_dir)), model_dir)
    assert meta["step"] == 20 and (model_dir / "model.pt").read_text() == "new weights"
    assert not (model_dir / "state.pt").exists()
    assert sorted(p.name for p in model_dir.parent.iterdir()) == ["model"]  # no staging or previous copies left


def test_disk_full_while_writing_a_checkpoint_registers_nothing(tmp_path, monkeypatch):
    """rank 0 writes the checkpoint into a private temporary directory and reports it only when whole:
    ENOSPC on the way is an error of that worker (FailureConfig restarts from the last registered
    checkpoint), never a partial checkpoint handed to Ray."""
    import ray.train

    from model.nmt import MultilingualNMT
    from orchestration import recipe

    model = MultilingualNMT(languages=["en", "fr"], vocab_size=50, embed_dim=8, encoder_hidden=8, decoder_hidden=8)
    optimizer = torch.optim.Adam(model.parameters())
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    spm_model = tmp_path / "spm.model"
    spm_model.write_bytes(b"spm")
    cfg = {"spm_model": str(spm_model), "config": {"name": "t"}}
    progress = {"step": 20, "dev_error": 0.5, "best_step": 20, "done": False, "history": []}
    reported, written = [], []
    monkeypatch.setattr(ray.train, "report", lambda metrics, checkpoint=None: reported.append(checkpoint))
    real_save = torch.save

    def disk_fills(obj, path, *args, **kwargs):
        written.append(Path(path).parent)
        if len(written) == 2:  # state.pt fits, model.pt does not
            raise OSError(28, "No space left on device", str(path))
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", disk_fills)
    with pytest.raises(OSError, match="No space left on device"):
        recipe._report(0, model, optimizer, scheduler, progress, model.state_dict(), cfg, {})
    assert reported == []  # nothing reached Ray
    assert not written[0].exists()  # the partial checkpoint directory is gone

    monkeypatch.setattr(torch, "save", real_save)
    seen = {}
    monkeypatch.setattr(ray.train, "report",
                        lambda metrics, checkpoint=None: seen.update(files=sorted(os.listdir(checkpoint.path))))
    recipe._report(0, model, optimizer, scheduler, progress, model.state_dict(), cfg, {})
    assert seen["files"] == ["config.yaml", "model.pt", "progress.json", "spm.model", "state.pt"]


def test_scheduled_lr_warms_up_then_follows_the_schedule():
    from orchestration.recipe import scheduled_lr

    t = {"lr": 1.0, "min_lr": 0.1, "warmup_steps": 4, "max_steps": 100, "max_minutes": None}
    assert [scheduled_lr({**t, "schedule": "cosine"}, s, 0.0) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    cosine = {**t, "schedule": "cosine"}
    assert 0.99 < scheduled_lr(cosine, 4, 0.0) < 1.0  # the cosine spans the whole budget, warmup included
    assert scheduled_lr(cosine, 50, 0.0) == pytest.approx(0.55)  # half way: (1 + 0.1) / 2
    assert scheduled_lr(cosine, 100, 0.0) == pytest.approx(0.1)
    # with a time budget the nearer of the two ends the schedule: 30 of 60 s is half way
    assert scheduled_lr({**cosine, "max_minutes": 1.0}, 5, 30.0) == pytest.approx(0.55)
    assert scheduled_lr({**t, "schedule": "inverse_sqrt"}, 15, 0.0) == pytest.approx(0.5)  # sqrt(4 / 16)
    assert scheduled_lr({**t, "schedule": "constant"}, 99, 0.0) == 1.0
    plateau = {**t, "schedule": "plateau"}
    assert scheduled_lr(plateau, 4, 0.0) == 1.0 and scheduled_lr(plateau, 5, 0.0) is None  # then ReduceLROnPlateau
    assert scheduled_lr({**plateau, "warmup_steps": 0}, 0, 0.0) is None
