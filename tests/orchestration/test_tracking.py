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
