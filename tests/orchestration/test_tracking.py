"""Every MLflow call of the project, on its own, against an embedded sqlite store."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import orchestration
from orchestration.adapters import registry, tracking
from orchestration.lifecycle import packaging
from orchestration.lifecycle.champion import MODEL_TAG
from tests.support.procs import free_ports
from tests.support.runs import untrained_model_dir


@pytest.fixture
def uri(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_a_relative_sqlite_store_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert tracking.resolve_uri("sqlite:///runs/m.db") == f"sqlite:///{tmp_path / 'runs' / 'm.db'}"
    assert tracking.resolve_uri("sqlite:////abs/m.db") == "sqlite:////abs/m.db"
    assert tracking.resolve_uri("http://host:5000") == "http://host:5000"


def test_params_are_the_flattened_config():
    assert tracking.flatten({"train": {"lr": 0.001, "paths": [1]}, "name": "x"}) == {
        "train.lr": "0.001",
        "train.paths": "[1]",
        "name": "x",
    }


def test_runs_nest_resume_and_keep_their_metrics(uri):
    parent = tracking.start_run(uri, "exp", "parent", {"name": "p"})
    run = tracking.start_run(
        uri, "exp", "child", {"train": {"lr": 0.5}}, parent_run_id=parent, tags={"interlingua.stage": "train"}
    )
    tracking.log_metrics(uri, run, {"dev/xsim_error": 0.5}, step=10)
    tracking.log_metrics(uri, run, {"dev/xsim_error": 0.25}, step=20)
    tracking.end_run(uri, run, "FAILED")
    assert tracking.start_run(uri, "exp", "child", {}, resume_run_id=run) == run  # resumed, not a new run
    got = tracking.get_run(uri, run)
    assert got.info.status == "RUNNING" and got.data.params["train.lr"] == "0.5"
    assert got.data.tags["mlflow.parentRunId"] == parent
    assert tracking.metric_history(uri, run, "dev/xsim_error") == [(10, 0.5), (20, 0.25)]
    fresh = tracking.start_run(uri, "exp", "again", {}, resume_run_id="0" * 32)  # gone: a new run instead
    assert fresh != run
    found = tracking.search_runs(uri, "exp", "tags.`interlingua.stage` = 'train'")
    assert [r.info.run_id for r in found] == [run]
    assert tracking.search_runs(uri, "no-such-experiment") == []


def test_an_unreachable_server_fails_fast_with_its_address(monkeypatch):
    import mlflow.tracking

    (port,) = free_ports(1)
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{port} is unreachable"):
        tracking.check_reachable(f"http://127.0.0.1:{port}")
    seen = {}
    real = mlflow.tracking.MlflowClient.search_experiments

    def probe(self, *args, **kwargs):  # what the probe runs under: one try, a short timeout, not minutes
        seen.update({k: os.environ.get(k) for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")})
        return real(self, *args, **kwargs)

    monkeypatch.setattr(mlflow.tracking.MlflowClient, "search_experiments", probe)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "7")  # a user's own setting
    with pytest.raises(ConnectionError):
        tracking.check_reachable(f"http://127.0.0.1:{port}")
    assert seen == {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "7"  # given back after the probe


def test_registry_versions_champion_alias_and_download(uri, small_dataset, tmp_path):
    model_dir = untrained_model_dir(small_dataset, tmp_path / "model")
    run = tracking.start_run(uri, "exp", "train", {})
    info = packaging.log_model(uri, run, model_dir, embedding_dim=32)
    assert registry.champion(uri, "m") is None
    version = registry.register_model(uri, info.model_uri, "m", {MODEL_TAG: "abc"})
    assert version == "1" and registry.find_version(uri, "m", MODEL_TAG, "abc") == "1"
    assert registry.find_version(uri, "m", MODEL_TAG, "other") is None
    registry.promote(uri, "m", version)
    assert str(registry.champion(uri, "m").version) == "1"
    downloaded = registry.download_model_dir(uri, "m", "1", tmp_path / "download")
    assert (downloaded / "model.safetensors").read_bytes() == (model_dir / "model.safetensors").read_bytes()


def test_the_project_wheel_holds_the_packages_and_is_named_after_their_contents(tmp_path, monkeypatch):
    import shutil
    import zipfile

    root = Path(orchestration.__file__).resolve().parents[1]
    fake = tmp_path / "checkout"  # a fixed copy: the real checkout may be edited while the test runs
    fake.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(root / name, fake / name)
    for package in ("core", "pipelines", "model", "orchestration", "evaluation"):
        (fake / package).mkdir()
        (fake / package / "__init__.py").write_text(f"NAME = {package!r}\n")
    monkeypatch.setattr(orchestration, "__file__", str(fake / "orchestration" / "__init__.py"))

    first = packaging.build_project_wheel(tmp_path / "a")
    assert packaging.build_project_wheel(tmp_path / "b").name == first.name  # same sources, same version
    assert re.fullmatch(r"interlingua-[0-9.]+\+src[0-9a-f]{12}-py3-none-any\.whl", first.name)
    names = set(zipfile.ZipFile(first).namelist())
    assert {f"{p}/__init__.py" for p in ("core", "pipelines", "model", "orchestration", "evaluation")} <= names
    assert {n.split("/")[0] for n in names} - {"core", "pipelines", "model", "orchestration", "evaluation"} == {
        f"{first.name.split('-py3')[0]}.dist-info"
    }
    assert not (fake / "build").exists() and "[egg_info]" not in (fake / "setup.cfg").read_text()

    (fake / "model" / "__init__.py").write_text("NAME = 'changed'\n")
    assert packaging.build_project_wheel(tmp_path / "c").name != first.name  # new code: a new environment


def test_a_non_editable_install_cannot_build_the_wheel_and_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(orchestration, "__file__", str(tmp_path / "site-packages" / "orchestration" / "__init__.py"))
    with pytest.raises(FileNotFoundError, match="pip install -e"):
        packaging.build_project_wheel(tmp_path / "out")


def test_requirements_are_pinned_without_the_local_label():
    import torch
    import yaml

    assert packaging.pinned(["torch", "PyYAML"]) == [
        f"torch=={torch.__version__.split('+')[0]}",
        f"PyYAML=={yaml.__version__}",
    ]
    assert "+" not in packaging.pinned(["torch"])[0]  # 2.13.0+cpu here: the label names an index, not a release


def test_a_server_is_browsed_at_its_address_and_a_local_store_with_mlflow_ui():
    assert tracking.how_to_browse("http://10.0.0.5:5000") == "open http://10.0.0.5:5000 in a browser"
    assert tracking.how_to_browse("sqlite:////runs/m.db") == "`mlflow ui --backend-store-uri sqlite:////runs/m.db`"


def _race(calls, hold) -> list:
    """Run each of `calls` in a thread of its own, each held once at the point where `hold(wait)` calls `wait()`
    until all are there: every one has looked the thing up and found none before any creates it. The results
    (or exceptions) in the order of `calls`."""
    import threading

    barrier, held = threading.Barrier(len(calls), timeout=60), threading.local()

    def wait() -> None:
        if getattr(held, "racing", False):
            held.racing = False
            barrier.wait()

    hold(wait)
    results: list = [None] * len(calls)

    def run(i: int) -> None:
        held.racing = True
        try:
            results[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - the test asserts on it
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results


def test_two_commands_creating_the_experiment_at_once_get_the_same_one(tmp_path, monkeypatch):
    """Two commands on a fresh store both look the experiment up, find none and create it: the one whose
    create loses the race reads the other's back (it goes on to its run lock, where the second `run` exits 5,
    not with a RESOURCE_ALREADY_EXISTS traceback)."""
    from mlflow.tracking import MlflowClient

    from tests.support.runs import store_uri

    uri = store_uri(tmp_path)
    assert tracking.experiment_names(uri) == ["Default"]  # the store opened once, not by both threads at once
    look_up = MlflowClient.get_experiment_by_name

    def hold(wait):
        def held(self, name):
            found = look_up(self, name)
            wait()  # after the look-up, before the create
            return found

        monkeypatch.setattr(MlflowClient, "get_experiment_by_name", held)

    first, second = _race([lambda: tracking.experiment_id(uri, "exp")] * 2, hold)
    assert isinstance(first, str) and first == second, (first, second)
    assert tracking.experiment_names(uri) == ["Default", "exp"]
    assert tracking.get_run(uri, tracking.start_run(uri, "exp", "after", {})).info.experiment_id == first


def test_two_commands_promoting_at_once_both_succeed_and_the_alias_is_one_of_theirs(tmp_path):
    """The champion alias's first setting creates it: two commands setting it at once (each looked for it and
    found none) both succeed, and it holds one of their versions. (The registered model's own creation,
    inside `mlflow.register_model`, treats RESOURCE_ALREADY_EXISTS as success: the second version here.)"""
    from mlflow.store.model_registry.dbmodels.models import SqlRegisteredModelAlias
    from sqlalchemy import event
    from sqlalchemy.orm import Session

    from tests.support.runs import store_uri

    uri = store_uri(tmp_path)
    run = tracking.start_run(uri, "exp", "train", {})
    tracking.log_text(uri, run, "flavors: {}\n", "model/MLmodel")  # a model folder's marker: registrable
    assert [registry.register_model(uri, f"runs:/{run}/model", "m", {}) for _ in range(2)] == ["1", "2"]

    listeners = []

    def hold(wait):
        def before_flush(session, context, instances):
            if any(isinstance(new, SqlRegisteredModelAlias) for new in session.new):
                wait()  # the alias was looked up (`session.merge`) and found absent; its INSERT comes next

        event.listen(Session, "before_flush", before_flush)
        listeners.append(before_flush)

    try:
        first, second = _race([lambda: registry.promote(uri, "m", "1"), lambda: registry.promote(uri, "m", "2")], hold)
    finally:
        for listener in listeners:
            event.remove(Session, "before_flush", listener)
    assert first is None and second is None, (first, second)
    assert str(registry.champion(uri, "m").version) in {"1", "2"}


def test_a_registered_version_whose_folder_links_out_is_refused_before_anything_is_copied(tmp_path):
    """A registered version whose artifacts in the (local) store hold a symbolic link to a file outside (as
    /etc/shadow would be): one BoundaryError naming the version and the link, not its target, and nothing of
    the target copied; MLflow's own download would have followed it."""
    from mlflow.tracking import MlflowClient

    from core.boundary import BoundaryError
    from tests.support.runs import store_uri

    uri = store_uri(tmp_path)
    run = tracking.start_run(uri, "exp", "train", {})
    tracking.log_text(uri, run, "flavors: {}\n", "pyfunc/MLmodel")
    for name in ("model.safetensors", "spm.model"):
        tracking.log_text(uri, run, "weights\n", f"pyfunc/artifacts/model_dir/{name}")
    assert registry.register_model(uri, f"runs:/{run}/pyfunc", "m", {}) == "1"
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret-hash:19000:0:99999:7:::\n")
    stored = Path(MlflowClient(tracking_uri=uri).get_model_version_download_uri("m", "1").removeprefix("file://"))
    (stored / "artifacts" / "model_dir" / "spm.model").unlink()
    (stored / "artifacts" / "model_dir" / "spm.model").symlink_to(secret)

    with pytest.raises(BoundaryError) as refused:
        registry.download_model_dir(uri, "m", "1", tmp_path / "download")
    message = str(refused.value)
    assert "models:/m/1" in message and "model_dir/spm.model" in message and "\n" not in message, message
    assert "shadow" not in message and "secret" not in message, message
    copied = [p.read_bytes() for p in (tmp_path / "download").rglob("*") if p.is_file()]
    assert not any(b"secret-hash" in data for data in copied)
