"""The run dir's lock across hosts, against a real S3 server's conditional PUT: two processes racing for an
s3:// run dir, a dead holder's lease taken over (never a user's object of its name), a lease lost to another
host; and the stage commands holding it too."""

import collections
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import boto3
import pytest

from core.errors import Exit
from orchestration.adapters.lease import LeaseLost
from orchestration.adapters.lock import AlreadyRunning, LockUnsupported, run_lock
from orchestration.cli import main
from tests.support.procs import run_to_end, wait_for

HOLD = textwrap.dedent("""
    import pathlib, sys, time
    from orchestration.adapters.lock import AlreadyRunning, run_lock
    run_dir, go, out = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    while not go.exists():  # start together: the race is the point
        time.sleep(0.01)
    try:
        with run_lock(run_dir, ttl=float(sys.argv[4])):
            out.write_text("held")
            while True:
                time.sleep(0.1)
    except AlreadyRunning as exc:
        out.write_text(f"refused: {exc}")
""")


def start_holder(run_dir: str, go, out, ttl: float = 60.0, *, own_pid_namespace: bool = False) -> subprocess.Popen:
    """A process holding the run dir's lock once `go` exists. `own_pid_namespace`: in a pid namespace of its
    own (`unshare`, root), as a container on this host is: its pid means nothing here; killing the returned
    process kills it too."""
    inner = [sys.executable, "-c", HOLD, run_dir, str(go), str(out), str(ttl)]
    wrap = ["unshare", "--pid", "--fork", "--kill-child"] if own_pid_namespace else []
    return subprocess.Popen([*wrap, *inner], env={**os.environ, "PYTHONPATH": os.getcwd()})


def test_of_two_hosts_racing_for_an_s3_run_dir_exactly_one_runs(s3_bucket, tmp_path):
    go, outs = tmp_path / "go", [tmp_path / "a", tmp_path / "b"]
    holders = [start_holder(f"{s3_bucket}/runs/x", go, out) for out in outs]
    try:
        go.touch()
        wait_for(lambda: all(out.exists() for out in outs), 30, "both holders' answers")
        results = sorted(out.read_text() for out in outs)
        assert results[0] == "held" and results[1].startswith("refused:"), results
        assert "held by another interlingua command (pid" in results[1]
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()


@pytest.mark.cluster  # `unshare`: root, as the test cluster's hosts
def test_a_dead_holders_lease_is_taken_over_once_it_is_not_renewed(s3_bucket, tmp_path):
    """A holder this process cannot see die (another host, or here another pid namespace) is waited out."""
    go, out = tmp_path / "go", tmp_path / "held"
    go.touch()
    holder = start_holder(f"{s3_bucket}/runs/x", go, out, ttl=3.0, own_pid_namespace=True)
    wait_for(out.exists, 30, "the holder to hold the lock")
    with pytest.raises(AlreadyRunning):
        with run_lock(f"{s3_bucket}/runs/x", ttl=3.0):
            pass  # the holder is alive and renewing
    holder.send_signal(signal.SIGKILL)  # dies without releasing: no renewal from now on
    holder.wait()
    with run_lock(f"{s3_bucket}/runs/x", wait=True, ttl=3.0, poll=0.2):
        body = json.loads(boto3.client("s3").get_object(Bucket="bucket", Key="runs/x/.lock")["Body"].read())
        assert body["holder"].startswith(f"pid {os.getpid()} ")
    with run_lock(f"{s3_bucket}/runs/x"):  # released on exit
        pass


def test_the_lease_of_a_command_killed_on_this_host_is_taken_over_at_once(s3_bucket, tmp_path):
    """A lease naming a process of this host (boot id, pid namespace) that has exited, or whose pid a later
    process has, is taken over without waiting out its ttl; one naming a live process is not."""
    from orchestration.adapters.holder import process_of

    go, out = tmp_path / "go", tmp_path / "held"
    go.touch()
    holder = start_holder(f"{s3_bucket}/runs/x", go, out)  # a ttl of 60 s
    wait_for(out.exists, 30, "the holder to hold the lock")
    with pytest.raises(AlreadyRunning):
        with run_lock(f"{s3_bucket}/runs/x"):
            pass
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    started = time.monotonic()
    with run_lock(f"{s3_bucket}/runs/x"):  # no --wait: taken over now, not in 60 s
        pass
    assert time.monotonic() - started < 30

    client, me = boto3.client("s3"), process_of(os.getpid())
    for start, taken in ((me["start"], False), (me["start"] + 1, True)):  # alive; a later process on its pid
        lease = {"holder": f"pid {os.getpid()} on elsewhere", "token": "t", "process": {**me, "start": start}}
        client.put_object(Bucket="bucket", Key="runs/x/.lock", Body=json.dumps(lease).encode())
        if taken:
            with run_lock(f"{s3_bucket}/runs/x"):
                pass
        else:
            with pytest.raises(AlreadyRunning):
                with run_lock(f"{s3_bucket}/runs/x"):
                    pass
            client.delete_object(Bucket="bucket", Key="runs/x/.lock")


@pytest.mark.parametrize(
    "sigint", [signal.default_int_handler, signal.SIG_IGN], ids=["sigint-handled", "sigint-ignored"]
)
def test_a_holder_whose_lease_was_taken_over_stops(s3_bucket, sigint):
    """Python's own SIGINT handler, as `interlingua run` has it in a terminal; and SIGINT ignored, as it is for
    `interlingua run &` started from a script: the lost lease stops the main thread either way."""
    previous = signal.signal(signal.SIGINT, sigint)
    try:
        _lease_taken_over(s3_bucket)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_every_renewal_gives_the_lease_a_new_etag(s3_bucket):
    """A late renewal between another host's HEAD and its DELETE (conditional on the ETag it saw) must make
    that DELETE fail: a renewal that rewrote the same bytes would keep the ETag."""
    client = boto3.client("s3")
    ttl = max(0.6, 30 * round_trip_s(client))
    with run_lock(f"{s3_bucket}/runs/x", ttl=ttl):
        seen = [client.head_object(Bucket="bucket", Key="runs/x/.lock")["ETag"]]
        deadline = time.monotonic() + 100 * ttl
        while len(set(seen)) < 3 and time.monotonic() < deadline:
            time.sleep(ttl / 10)
            seen.append(client.head_object(Bucket="bucket", Key="runs/x/.lock")["ETag"])
    assert len(set(seen)) >= 3, f"the lease kept its ETag through its renewals: {sorted(set(seen))}"


def round_trip_s(client) -> float:
    """The median time of a PUT to the S3 server, on this machine as loaded as it is now."""
    times = []
    for _ in range(5):
        start = time.monotonic()
        client.put_object(Bucket="bucket", Key="probe", Body=b"x")
        times.append(time.monotonic() - start)
    return sorted(times)[len(times) // 2]


def _lease_taken_over(s3_bucket: str) -> None:
    """The lease's timing is derived from the store's measured round trip, not fixed: a renewal every ttl/3
    is many round trips apart however loaded the machine is, and the wait for the interrupt is bounded by
    a number of renewal periods, not by a constant."""
    client = boto3.client("s3")
    ttl = max(0.6, 30 * round_trip_s(client))
    with pytest.raises(LeaseLost, match="taken over by another host"):
        with run_lock(f"{s3_bucket}/runs/x", ttl=ttl):
            # another host, finding the lease stale, deleted it and took it
            client.put_object(Bucket="bucket", Key="runs/x/.lock", Body=b'{"holder": "other"}')
            deadline = time.monotonic() + 100 * ttl  # interrupted by the first renewal that finds the lease gone
            while time.monotonic() < deadline:
                time.sleep(ttl / 10)
            raise AssertionError(f"no renewal noticed the lost lease in {100 * ttl:.1f} s (ttl {ttl:.2f} s)")
    assert client.get_object(Bucket="bucket", Key="runs/x/.lock")["Body"].read() == b'{"holder": "other"}'


def test_a_second_run_on_an_s3_run_dir_exits_5(s3_bucket, tmp_path, capsys):
    with run_lock(f"{s3_bucket}/runs/x"):
        code = main(["run", f"run_dir={s3_bucket}/runs/x", f"tracking.uri=sqlite:///{tmp_path / 'm.db'}"])
    assert code == Exit.ALREADY_RUNNING
    assert "is held by another interlingua command" in capsys.readouterr().err


def test_a_scheme_without_conditional_create_is_refused_for_run():
    with pytest.raises(LockUnsupported, match="gs://"):
        with run_lock("gs://bucket/runs/x"):
            pass


def test_a_users_lock_file_in_a_local_run_dir_is_refused_and_kept(tmp_path):
    from core.ownership import ForeignDataError

    (tmp_path / ".lock").write_text("my lock notes\n")
    with pytest.raises(ForeignDataError, match=r"\.lock.*did not write"):
        with run_lock(tmp_path):
            pass
    assert (tmp_path / ".lock").read_text() == "my lock notes\n"
    (tmp_path / ".lock").write_text("pid 12 on another-host\n")  # one a killed run left: the product's own
    with run_lock(tmp_path):
        assert (tmp_path / ".lock").read_text().startswith(f"pid {os.getpid()} on ")


def test_a_users_object_named_like_the_lease_is_never_taken_over_however_old(s3_bucket):
    from core.ownership import ForeignDataError

    client = boto3.client("s3")
    client.put_object(Bucket="bucket", Key="runs/x/.lock", Body=b"my notes")
    time.sleep(2.5)  # older than the ttl below, by the store's whole-second clock
    with pytest.raises(ForeignDataError, match=r"runs/x/\.lock.*did not write"):
        with run_lock(f"{s3_bucket}/runs/x", ttl=1.0):
            pass
    assert client.get_object(Bucket="bucket", Key="runs/x/.lock")["Body"].read() == b"my notes"


@pytest.mark.parametrize("command", ["prepare", "train", "evaluate", "tune"])
def test_a_stage_command_on_a_run_dir_in_use_exits_5_naming_the_holder(tmp_path, capsys, command):
    """Two stage commands (or one and a `run`) never write one run dir at once: the second one stops before
    any work."""
    run_dir = tmp_path / "run"
    with run_lock(run_dir):
        space = ["--space", "configs/tune/bible6-cpu.yaml"] if command == "tune" else []
        code = main([command, *space, f"run_dir={run_dir}", f"tracking.uri=sqlite:///{tmp_path / 'm.db'}"])
    assert code == Exit.ALREADY_RUNNING
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"interlingua {command}: {run_dir} is in use by another interlingua command (pid "), line
    assert f"`interlingua {command}` waits for no one" in line


def test_a_holder_whose_lease_was_taken_over_commits_nothing_more(s3_bucket, tmp_path):
    """The fence: every commit looks at the lease first, before any renewal would notice (ttl 60 s)."""
    from orchestration.adapters.state import StageRecord, state_bytes
    from orchestration.train import train_dir

    client = boto3.client("s3")
    first, second = StageRecord(fingerprint="0f", run_id="r1"), StageRecord(fingerprint="1a", run_id="r2")
    before, after = train_dir.folder(tmp_path / "before"), train_dir.folder(tmp_path / "after")
    with pytest.raises(LeaseLost, match="taken over by another host"):
        with run_lock(f"{s3_bucket}/runs/x"):
            before.write_record("run.json", state_bytes(first))  # its own lease: committed
            client.put_object(Bucket="bucket", Key="runs/x/.lock", Body=b'{"holder": "other"}')
            after.write_record("run.json", state_bytes(second))
    assert (tmp_path / "before" / "run.json").is_file() and not (tmp_path / "after").exists()
    after.write_record("run.json", state_bytes(second))  # no lease held: nothing to fence
    assert (tmp_path / "after" / "run.json").is_file()


def test_a_local_lock_leaves_no_file_and_a_waiter_locks_the_file_that_is_there(tmp_path):
    """The holder removes its lock file before unlocking it; a command that waited on the removed file locks
    the path's new one, so a third command is still kept out."""
    import threading

    released, waiter_in, outcome = threading.Event(), threading.Event(), {}

    def waiter():
        with run_lock(tmp_path, wait=True):
            waiter_in.set()
            released.wait(60)

    with run_lock(tmp_path):
        assert (tmp_path / ".lock").read_text().startswith(f"pid {os.getpid()} on ")
        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.5)  # the waiter is blocked on this holder's file (no event to wait on inside flock)
    assert waiter_in.wait(60)
    try:
        with run_lock(tmp_path):
            outcome["third"] = "got in"
    except AlreadyRunning:
        outcome["third"] = "kept out"
    released.set()
    thread.join(60)
    assert outcome == {"third": "kept out"}
    assert not (tmp_path / ".lock").exists()


@pytest.mark.ray
def test_a_holder_paused_past_its_lease_commits_nothing_once_it_wakes(s3_bucket, small_dataset, tmp_path):
    """`interlingua train` on a run dir in the bucket is paused (SIGSTOP to it, its Ray and its workers: a
    host that froze) once a checkpoint is committed, longer than its lease (runtime.lease_ttl_s=4). A second
    `train` takes the lease over, resumes from the last checkpoint into a Ray folder of its own and finishes.
    The first, woken, exits 130 with one line and commits nothing: no file of the run dir outside its own Ray
    folder (which the next command removes), no metric or status of the MLflow run the second finished (the
    same run, resumed); its workers' metrics and checkpoints are fenced (`worker_fence.worker_fence`). Slow (two
    trainings through Ray, the pause): the fence of the workers is only seen with real workers that wake up in
    the middle of their work."""
    from tests.support.tracking_server import sqlite_server

    run_dir = f"{s3_bucket}/runs/paused"
    with sqlite_server(tmp_path) as uri:  # a tracking server, as on a cluster: a paused process holds no lock of it
        _pause_a_holder_past_its_lease(run_dir, uri, small_dataset)


def _pause_a_holder_past_its_lease(run_dir: str, uri: str, small_dataset) -> None:
    import psutil

    from core import storage
    from orchestration.adapters import tracking
    from tests.support.procs import family
    from tests.support.runs import TINY

    command = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "train",
        f"run_dir={run_dir}",
        f"dataset_dir={small_dataset.data_dir}",
        f"tracking.uri={uri}",
        "prepare.spm.vocab_size=2000",
        *TINY,
        "train.max_steps=40",
        "runtime.checkpoint_every_steps=10",
        "runtime.lease_ttl_s=4",
        "runtime.cpus_per_worker=1",
    ]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    holder = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    paused = []
    try:

        def registered() -> bool:  # a checkpoint Ray registered in the holder's folder: committed
            snapshots = [
                f
                for f in storage.files(f"{run_dir}/train")
                if re.fullmatch(r"ray-[0-9a-f]{12}/checkpoint_manager_snapshot\.json", f)
            ]
            return any(storage.read_json(f"{run_dir}/train/{f}").get("checkpoint_results") for f in snapshots)

        wait_for(registered, 300, "the holder's first checkpoint", holder)
        paused = family(holder.pid)
        for process in paused:
            process.suspend()
        at_pause = storage.read_json(f"{run_dir}/train/run.json")
        holder_folder, frozen_run = at_pause["ray_dir"], at_pause["run_id"]  # Ray's storage, its own; the MLflow run
        reached = max(
            (
                step
                for key in tracking.get_run(uri, frozen_run).data.metrics
                for step, _ in tracking.metric_history(uri, frozen_run, key)
            ),
            default=0,
        )
        time.sleep(4 + 2)  # the pause itself: past the lease's 4 s and the store's whole-second clock
        taker = run_to_end(command, 600, env=env)
        assert taker.returncode == 0, taker.stderr[-3000:]
        assert "taking it over" in taker.stderr, taker.stderr[-3000:]
        committed = {f: storage.sha256(storage.join(run_dir, f)) for f in storage.files(run_dir)}
        state = storage.read_json(f"{run_dir}/train/run.json")
        run = tracking.get_run(uri, state["run_id"])
        history = {key: tracking.metric_history(uri, state["run_id"], key) for key in run.data.metrics}
    finally:
        for process in paused:
            with contextlib.suppress(psutil.Error):
                process.resume()
        out, err = holder.communicate(timeout=300)
    assert holder.returncode == Exit.INTERRUPTED, err[-3000:]
    assert [line for line in err.splitlines() if line.startswith("interlingua")] == [
        "interlingua train: stopped: the run lock's lease was taken over by another host; this command commits "
        "nothing more"
    ], err[-3000:]
    assert state["done"]  # the taker finished (at 40 steps, or earlier when the dev error stopped improving)
    # the taker resumed from the holder's last checkpoint into a folder of its own, and removed the holder's once done
    assert state["ray_dir"] != holder_folder and state["resumed_from"].startswith(f"{holder_folder}/checkpoint_")
    assert not any(f.startswith(f"train/{holder_folder}/") for f in committed)
    progress = storage.read_json(f"{run_dir}/train/model/progress.json")
    assert progress["history"][-1]["resumed_at_step"] >= 10
    now = {f: storage.sha256(storage.join(run_dir, f)) for f in storage.files(run_dir)}
    # What the woken holder may still write, before its driver stops it (a third of the lease later): the rest
    # of a checkpoint upload of Ray's that a worker had in flight when it froze, and its controller's record of
    # checkpoints: in the holder's own folder, which nothing reads. Nothing else changes or goes.
    changed = {f for f in {*now, *committed} if now.get(f) != committed.get(f)}
    assert all(f.startswith(f"train/{holder_folder}/") and f in now for f in changed), changed
    # the next command that trains there removes what the woken holder left (here: nothing to train)
    rerun = run_to_end(command, 600, env=env)
    assert rerun.returncode == 0 and "already trained" in rerun.stdout, rerun.stderr[-3000:]
    assert {f: storage.sha256(storage.join(run_dir, f)) for f in storage.files(run_dir)} == committed
    again = tracking.get_run(uri, state["run_id"])
    assert again.info.status == "FINISHED" and state["run_id"] == frozen_run
    # The MLflow run the taker finished: no metric changed or went, and the woken holder added at most what a
    # worker had in flight when it froze (a batch past its fence check, as a checkpoint upload is Ray's): one log
    # window, at most the next after the last step logged before the pause. Nothing after it.
    after = {key: tracking.metric_history(uri, state["run_id"], key) for key in again.data.metrics}
    assert set(after) == set(history)
    extra = {
        key: list((collections.Counter(after[key]) - collections.Counter(history[key])).elements()) for key in after
    }
    assert all(collections.Counter(history[key]) <= collections.Counter(after[key]) for key in after), (history, after)
    steps = {step for entries in extra.values() for step, _ in entries}
    assert len(steps) <= 1 and all(step <= reached + 5 for step in steps), (reached, extra)
