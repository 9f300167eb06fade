"""The storage layer on a real S3 server (moto's): locations, endpoint configuration, whole directories."""

import json
import os
from pathlib import Path

import pytest

from core import connection, ownership, storage, transfer
from orchestration.config import ConfigError, load_config


@pytest.mark.parametrize(
    "location",
    ["s3:/bucket/runs/x", "s3:bucket/runs", "ftp://host/x", "file://relative/x", "s3://", "s3:///runs/x", "gs://"],
)
def test_a_location_that_is_no_supported_uri_is_refused_naming_its_key(location):
    with pytest.raises(ConfigError, match="run_dir"):
        load_config(None, [f"run_dir={location}"])


def test_local_paths_and_supported_uris_are_accepted():
    for location in ("runs/x", "/tmp/runs/x", "s3://bucket/runs/x", "file:///tmp/x", "gs://b/x", "hdfs://nn/x"):
        assert storage.check_location(location, "run_dir") == location
    config = load_config(None, ["run_dir=s3://bucket/runs/x"])
    assert config.train_dir == "s3://bucket/runs/x/train" and config.data_dir == "s3://bucket/runs/x/data"
    with pytest.raises(storage.StorageError, match="no bucket"):  # never the local folder `s3:/data`
        storage.join("s3://", "data")


def test_the_endpoint_comes_from_the_environment_or_the_storage_section(monkeypatch):
    monkeypatch.setenv(connection.ENDPOINT_ENV, "http://127.0.0.1:9999")
    monkeypatch.delenv(connection.SCHEME_ENV, raising=False)
    monkeypatch.delenv(connection.REGION_ENV, raising=False)
    assert connection.s3_options() == {"endpoint_override": "127.0.0.1:9999", "scheme": "http"}
    connection.configure(endpoint="https://store.example:443", region="eu-west-1")
    assert connection.s3_options() == {
        "endpoint_override": "store.example:443",
        "scheme": "https",
        "region": "eu-west-1",
    }
    assert connection.environment()[connection.ENDPOINT_ENV] == "https://store.example:443"  # what Ray workers inherit


def test_the_keys_reach_the_workers_only_when_forwarding_is_asked_for(monkeypatch):
    """A worker on another node uses its own node's credential chain: what goes into a Ray runtime_env shows in
    Ray's job metadata and dashboard, so the driver's keys go there only with storage.forward_credentials."""
    monkeypatch.setenv(connection.ENDPOINT_ENV, "http://store:9000")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "driver-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "driver-secret")
    monkeypatch.delenv(connection.FORWARD_ENV, raising=False)
    connection.configure()
    env = connection.environment()
    assert env[connection.ENDPOINT_ENV] == "http://store:9000"
    assert not set(env) & set(connection.CREDENTIALS_ENV) and "driver-secret" not in repr(env)
    connection.configure(forward_credentials=True)
    assert connection.environment()["AWS_SECRET_ACCESS_KEY"] == "driver-secret"
    assert connection.environment()[connection.FORWARD_ENV] == "1"  # a trial's own workers get them too


def test_files_json_and_directories_round_trip_through_the_bucket(s3_bucket, tmp_path, verse):
    verse = verse("l", 8, 1, 1)  # Ruth 1:1 in French: real text, not ASCII
    storage.write_json(storage.join(s3_bucket, "a", "state.json"), {"verse": verse})
    assert storage.read_json(f"{s3_bucket}/a/state.json") == {"verse": verse}
    local = tmp_path / "model"
    (local / "sub").mkdir(parents=True)
    (local / "model.safetensors").write_bytes(verse.encode() * 3)
    (local / "sub" / "spm.model").write_text(verse)
    assert transfer.upload_dir(local, f"{s3_bucket}/m") == ["model.safetensors", "sub/spm.model"]
    assert storage.files(f"{s3_bucket}/m") == ["model.safetensors", "sub/spm.model"]
    back = tmp_path / "back"
    assert transfer.download_dir(f"{s3_bucket}/m", back) == ["model.safetensors", "sub/spm.model"]
    assert (back / "sub" / "spm.model").read_text() == verse
    assert storage.sha256(f"{s3_bucket}/m/model.safetensors") == storage.sha256(local / "model.safetensors")


def test_a_directory_is_uploaded_several_files_at_once_and_its_commit_file_last(
    s3_bucket, tmp_path, verse, monkeypatch
):
    import threading

    local = tmp_path / "eval"
    for i in range(12):
        (local / "embeddings" / f"part-{i:05d}.npy").parent.mkdir(parents=True, exist_ok=True)
        (local / "embeddings" / f"part-{i:05d}.npy").write_text(verse("l", 8, 1, i + 1))
    (local / "state.json").write_text("{}")
    copied, threads, real = [], set(), transfer.pafs.copy_files

    def recording(source, destination, **kwargs):
        real(source, destination, **kwargs)
        copied.append(destination.rsplit("/eval/", 1)[1])
        threads.add(threading.get_ident())

    monkeypatch.setattr(transfer.pafs, "copy_files", recording)
    names = transfer.upload_dir(local, f"{s3_bucket}/eval", last=("state.json",))
    assert copied[-1] == "state.json" and sorted(copied) == names and len(names) == 13
    assert len(threads) > 1  # not one object after another
    assert storage.read_bytes(f"{s3_bucket}/eval/embeddings/part-00011.npy").decode() == verse("l", 8, 1, 12)


def test_a_foreign_object_under_a_prefix_is_never_removed(s3_bucket, verse):
    verse = verse("k", 8, 1, 1)
    storage.write_bytes(f"{s3_bucket}/out/notes.txt", verse.encode())
    with pytest.raises(ownership.ForeignDataError, match="notes.txt"):
        ownership.check_only_ours(f"{s3_bucket}/out", lambda e: e == "manifest.json", what="-o", advice="move it")
    with pytest.raises(ownership.ForeignDataError, match="notes.txt"):
        ownership.make_staging(f"{s3_bucket}/out")
    assert storage.read_bytes(f"{s3_bucket}/out/notes.txt") == verse.encode()


def test_check_writable_probes_a_uri_and_leaves_nothing(s3_bucket):
    from orchestration.adapters.state import check_writable

    check_writable(f"{s3_bucket}/runs/x", "run_dir")
    assert storage.entries(f"{s3_bucket}/runs/x") == []
    with pytest.raises(ConfigError, match="run_dir: cannot write in s3://missing-bucket/x .*not found"):
        check_writable("s3://missing-bucket/x", "run_dir")
    assert Path("s3:").exists() is False


def test_an_unreachable_store_or_missing_bucket_is_one_line_and_exit_1(s3_bucket, monkeypatch, capsys):
    from orchestration.cli import main

    assert main(["train", "run_dir=s3://no-such-bucket/runs/x"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        "interlingua train: error: run_dir: s3://no-such-bucket/runs/x: bucket 'no-such-bucket' does "
        f"not exist at {storage.os.environ[connection.ENDPOINT_ENV]}; create it first"
    )
    monkeypatch.setenv(connection.ENDPOINT_ENV, "http://127.0.0.1:9")  # nothing listens there
    assert main(["evaluate", f"dataset_dir={s3_bucket}/data"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"interlingua evaluate: error: dataset_dir: {s3_bucket}/data: the store does not answer")
    assert "\n" not in err


def test_tune_refuses_a_users_best_yaml_in_the_bucket_before_any_work(s3_bucket, tmp_path, monkeypatch, capsys):
    from orchestration.cli import main

    monkeypatch.chdir(tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text("space:\n  train.lr: {loguniform: [0.0001, 0.01]}\n")
    notes = b"# my own notes on the search\n"
    storage.write_bytes(f"{s3_bucket}/runs/x/tune/best.yaml", notes)
    assert (
        main(
            [
                "tune",
                "--space",
                str(space),
                f"run_dir={s3_bucket}/runs/x",
                f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert f"tune: {s3_bucket}/runs/x/tune holds what interlingua did not write (best.yaml)" in err
    assert storage.files(f"{s3_bucket}/runs/x") == ["tune/best.yaml"]  # nothing else written, nothing replaced
    assert storage.read_bytes(f"{s3_bucket}/runs/x/tune/best.yaml") == notes
    assert not (tmp_path / "s3:").exists()


def test_a_file_is_replaced_whole_through_a_temporary_name_of_its_own_and_never_over_a_file_there(
    tmp_path, monkeypatch
):
    import uuid

    target = tmp_path / "out" / "vectors.npy"
    storage.replace_bytes(target, b"first")  # its parent made
    storage.replace_bytes(str(target), b"second")
    assert target.read_bytes() == b"second" and sorted(p.name for p in target.parent.iterdir()) == ["vectors.npy"]

    # a write that fails on the way (here the rename: a folder has the name) leaves no temporary file
    blocked = tmp_path / "out" / "blocked.npy"
    (blocked / "a user's").mkdir(parents=True)
    with pytest.raises(OSError):
        storage.replace_bytes(blocked, b"third")
    assert sorted(p.name for p in target.parent.iterdir()) == ["blocked.npy", "vectors.npy"]
    assert [p.name for p in blocked.iterdir()] == ["a user's"]

    # the temporary name is created exclusively: a file that happens to carry it is never overwritten
    fixed = uuid.UUID("0123456789abcdef0123456789abcdef")
    sentinel = target.parent / f"vectors.npy.tmp-{fixed.hex[:8]}"
    sentinel.write_text("a user's file: never overwrite me\n")
    monkeypatch.setattr(uuid, "uuid4", lambda: fixed)
    with pytest.raises(FileExistsError):
        storage.replace_bytes(target, b"fourth")
    assert sentinel.read_text() == "a user's file: never overwrite me\n" and target.read_bytes() == b"second"


@pytest.mark.parametrize("write", ["write_bytes", "replace_bytes", "write_json"])
def test_a_write_makes_a_new_file_so_a_hard_linked_snapshot_keeps_its_bytes(tmp_path, write):
    """`cp -al`, rsnapshot and `rsync --link-dest` share inodes with the output: a write must never open one."""
    out, snapshot = tmp_path / "out", tmp_path / "snapshot"
    out.mkdir()
    snapshot.mkdir()
    (out / "metrics.json").write_bytes(b'{"old": 1}\n')
    os.link(out / "metrics.json", snapshot / "metrics.json")
    data = {"new": 2} if write == "write_json" else b'{"new": 2}\n'
    getattr(storage, write)(str(out / "metrics.json"), data)
    assert json.loads((out / "metrics.json").read_bytes()) == {"new": 2}
    assert (snapshot / "metrics.json").read_bytes() == b'{"old": 1}\n'
    assert os.stat(out / "metrics.json").st_ino != os.stat(snapshot / "metrics.json").st_ino
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json"]  # no temporary file left beside it
