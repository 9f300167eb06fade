"""`interlingua run` on real Bible text: the stage cache, the champion decision, a killed run, the lock,
against the embedded sqlite store and a real `mlflow server`."""
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

from core.errors import Exit
from orchestration import tracking
from orchestration.cli import main
from orchestration.config import load_config
from orchestration.lifecycle.compare import compare_runs
from orchestration.lifecycle.lock import run_lock
from orchestration.lifecycle.run import run_pipeline
from tests.conftest import SMALL_BOOKS, VERSIONS, write_lines
from tests.orchestration.helpers import TINY, checkpoints, wait_for

LANGS = list(VERSIONS)
RETUNED = ["train.lr=0.003", "model.ranking_weight=1.0"]  # another model/train config: a new challenger


def write_corpus(folder: Path, book_lines, books: list[int]) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    for lang, lines in book_lines(VERSIONS, books).items():
        write_lines(folder / f"bible.{lang}", lines)
    return str(folder / "bible.{lang}")


def pipeline_config(tmp_path: Path, template: str, uri: str, *overrides: str):
    return load_config(None, [
        "name=pipe", f"run_dir={tmp_path / 'run'}", f"tracking.uri={uri}",
        f"prepare.sources=[{{kind: text, path: '{template}', languages: {LANGS}}}]",
        "prepare.split.dev_size=40", "prepare.split.test_size=40", "prepare.spm.vocab_size=1500",
        *TINY, "train.max_steps=10", "evaluate.shards=2", *overrides,
    ])


@pytest.mark.slow
def test_run_caches_stages_promotes_and_reruns_on_new_data(tmp_path, book_lines, local_ray):
    template = write_corpus(tmp_path / "corpus", book_lines, SMALL_BOOKS)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = pipeline_config(tmp_path, template, uri)

    first = run_pipeline(config)
    assert first.code == Exit.OK and first.stages == dict.fromkeys(["prepare", "train", "evaluate",
                                                                            "register"], "ran")
    second = run_pipeline(config)  # the scheduled rerun: nothing new
    assert second.code == Exit.NOTHING_TO_DO
    assert second.stages == dict.fromkeys(["prepare", "train", "evaluate", "register"], "skipped")

    # another config: a challenger, measured against the champion re-evaluated on the same split; it is
    # promoted exactly when it is better (which one wins on 10 steps is not this test's business)
    retuned = pipeline_config(tmp_path, template, uri, *RETUNED)
    third = run_pipeline(retuned)
    assert third.stages == {"prepare": "skipped", "train": "ran", "evaluate": "ran", "register": "ran"}
    promoted = third.challenger_error < third.champion_error
    assert third.code == (Exit.OK if promoted else Exit.NOT_PROMOTED), third.message
    champion_version = "2" if promoted else "1"
    assert str(tracking.champion(uri, "pipe").version) == champion_version

    # new data: prepare and everything after it run again; an impossible margin keeps the champion, and a
    # zero pair budget names every pair on which the challenger is worse
    write_corpus(tmp_path / "corpus", book_lines, SMALL_BOOKS + [17])  # + Esther
    stricter = pipeline_config(tmp_path, template, uri, *RETUNED, "registry.min_improvement=1.0",
                               "registry.max_pair_regression=0.0")
    fourth = run_pipeline(stricter)
    assert fourth.stages == dict.fromkeys(["prepare", "train", "evaluate", "register"], "ran")
    assert fourth.code == Exit.NOT_PROMOTED and "not promoted" in fourth.message
    assert fourth.champion_error is not None  # the champion was re-evaluated on the new test split
    # new data, a new tokenizer: the champion was fed the same sentences encoded with its own (its registered
    # lineage names another spm.model than the new dataset's; fed the dataset's token ids, it would be refused)
    champion_tags = next(v for v in tracking.model_versions(uri, "pipe") if str(v.version) == str(champion_version)).tags
    new_spm = json.loads((Path(config.data_dir) / "manifest.json").read_text())["spm"]["sha256"]
    assert champion_tags["interlingua.spm_sha256"] != new_spm
    assert str(tracking.champion(uri, "pipe").version) == champion_version

    # the stages are runs under one pipeline run each
    pipeline_runs = tracking.search_runs(uri, "interlingua", "tags.`interlingua.stage` = 'pipeline'")
    assert len(pipeline_runs) == 4
    children = tracking.search_runs(uri, "interlingua", f"tags.`mlflow.parentRunId` = '{fourth.run_id}'")
    assert {r.data.tags["interlingua.stage"] for r in children} == {"train", "evaluate"}
    pipeline = tracking.get_run(uri, fourth.run_id).data
    assert pipeline.metrics["register/promoted"] == 0.0 and pipeline.tags["register.max_pair_regression"] == "0.0"

    # the pair guard compared the two evaluation runs of this pipeline run, pair by pair
    evals = {r.info.run_name: r.data.metrics for r in children if r.data.tags["interlingua.stage"] == "evaluate"}
    challenger, champion = evals["pipe-eval-test"], evals[f"pipe-eval-test-champion-v{champion_version}"]
    worse = {key.split("/")[-1] for key, error in challenger.items()
             if key.startswith("eval/xsim_error/") and "avg_" not in key and error > champion[key]}
    blocked = {key.split("/")[-1] for key in pipeline.metrics if key.startswith("register/pair_regression/")}
    assert blocked == worse and pipeline.metrics["register/blocking_pairs"] == len(worse)
    assert ("pair(s) worse than the champion's" in fourth.message) == bool(worse), fourth.message


@pytest.mark.slow
def test_a_killed_run_resumes_training_and_registers_nothing_half_trained(tmp_path, book_lines, local_ray):
    import ray

    template = write_corpus(tmp_path / "corpus", book_lines, SMALL_BOOKS)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = [
        "name=pipe", f"run_dir={tmp_path / 'run'}", f"tracking.uri={uri}",
        f"prepare.sources=[{{kind: text, path: '{template}', languages: {LANGS}}}]",
        "prepare.split.dev_size=40", "prepare.split.test_size=40", "prepare.spm.vocab_size=1500",
        *TINY, "train.max_steps=150", "train.early_stop_patience_evals=null", "evaluate.shards=2",
        # the test's Ray cluster outlives the killed driver, as a real cluster would
        f"runtime.ray_address={ray.get_runtime_context().gcs_address}",
    ]
    train_dir = tmp_path / "run" / "train"
    log = open(tmp_path / "killed.log", "wb")
    driver = subprocess.Popen([str(Path(sys.executable).with_name("interlingua")), "run", *overrides],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        killed_at = wait_for(lambda: [c["step"] for c in checkpoints(train_dir) if c["step"] >= 30], 300,
                             "a checkpoint at step 30", driver)[-1]
        driver.send_signal(signal.SIGKILL)  # the whole `interlingua run` dies mid-training
        driver.wait(30)
    finally:
        if driver.poll() is None:
            driver.kill()
    killed = tracking.search_runs(uri, "interlingua", "tags.`interlingua.stage` = 'pipeline'")
    assert [r.info.status for r in killed] == ["RUNNING"]  # left behind by the kill
    assert tracking.model_versions(uri, "pipe") == []  # nothing half-trained registered

    outcome = run_pipeline(load_config(None, overrides))  # the next scheduled run
    assert outcome.code == Exit.OK and outcome.stages["prepare"] == "skipped", outcome.message
    trains = tracking.search_runs(uri, "interlingua", "tags.`interlingua.stage` = 'train'")
    assert len(trains) == 1 and trains[0].info.status == "FINISHED"  # resumed, not duplicated
    progress = json.loads((train_dir / "model" / "progress.json").read_text())
    resumed = [h["resumed_at_step"] for h in progress["history"] if "resumed_at_step" in h]
    assert resumed and resumed[0] >= killed_at and progress["step"] == 150
    assert tracking.get_run(uri, killed[0].info.run_id).info.status == "KILLED"
    pipelines = tracking.search_runs(uri, "interlingua", "tags.`interlingua.stage` = 'pipeline'")
    assert sorted(r.info.status for r in pipelines) == ["FINISHED", "KILLED"]
    versions = tracking.model_versions(uri, "pipe")
    assert len(versions) == 1 and versions[0].tags["train_run_id"] == trains[0].info.run_id


def test_a_second_run_on_the_same_config_exits_already_running(tmp_path, capsys):
    run_dir = tmp_path / "run"
    with run_lock(run_dir):
        code = main(["run", f"run_dir={run_dir}", f"tracking.uri=sqlite:///{tmp_path / 'm.db'}"])
    assert code == Exit.ALREADY_RUNNING
    assert "in use by another `interlingua run`" in capsys.readouterr().err


def test_an_unreachable_tracking_server_fails_before_any_work(tmp_path, capsys, monkeypatch):
    import pipelines.prepare

    def no_work(*args, **kwargs):
        raise AssertionError("prepare started before the tracking store was checked")

    monkeypatch.setattr(pipelines.prepare, "run_prepare", no_work)
    port = free_port()
    code = main(["run", f"run_dir={tmp_path / 'run'}", f"tracking.uri=http://127.0.0.1:{port}"])
    assert code == 1
    assert "unreachable" in capsys.readouterr().err
    assert not (tmp_path / "run" / "data").exists()  # nothing was prepared


# --- a real tracking server ---------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """`mlflow server` on 127.0.0.1 with an sqlite backend, started and stopped here."""
    folder = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("mlflow")), "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{folder / 'server.db'}",
         "--artifacts-destination", str(folder / "artifacts"), "-w", "1"],
        env=env, stdout=open(folder / "server.log", "wb"), stderr=subprocess.STDOUT,
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            tracking.check_reachable(uri)
            break
        except ConnectionError:
            if proc.poll() is not None:
                raise AssertionError((folder / "server.log").read_text()[-2000:])
            time.sleep(1)
    else:
        proc.kill()
        raise AssertionError("mlflow server did not come up in 120 s")
    yield uri
    proc.terminate()
    proc.wait(30)


@pytest.mark.slow
def test_run_and_compare_against_a_tracking_server(tmp_path, book_lines, mlflow_server, local_ray):
    template = write_corpus(tmp_path / "corpus", book_lines, SMALL_BOOKS)
    config = pipeline_config(tmp_path, template, mlflow_server, "name=served")
    assert run_pipeline(config).code == Exit.OK
    assert run_pipeline(config).code == Exit.NOTHING_TO_DO
    assert str(tracking.champion(mlflow_server, "served").version) == "1"
    table = compare_runs(config)
    assert "served-eval-test" in table and "1 evaluation runs" in table


@pytest.mark.slow
def test_the_loop_closes_the_champion_mines_pairs_and_run_retrains_on_them(tmp_path, book_lines, local_ray):
    """run -> mine with the champion -> run on the corpus plus the mined pairs: a new dataset, model and
    decision. Ruth and Jonah hidden among distractors, as in tests/orchestration/mine."""
    from orchestration.mine.job import mine

    template = write_corpus(tmp_path / "corpus", book_lines, SMALL_BOOKS)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert run_pipeline(pipeline_config(tmp_path, template, uri)).code == Exit.OK
    manifest = tmp_path / "run" / "data" / "manifest.json"
    tuples_before = json.loads(manifest.read_text())["counts"]["tuples"]["in"]

    hidden = book_lines({"fr": "l", "en": "k"}, [8, 32])
    write_lines(tmp_path / "fr.txt", hidden["fr"] + book_lines({"fr": "l"}, [17])["fr"])
    write_lines(tmp_path / "en.txt", book_lines({"en": "k"}, [25])["en"] + hidden["en"][::-1])
    inputs = (f"mine.inputs=[{{lang: fr, path: '{tmp_path / 'fr.txt'}'}}, "
              f"{{lang: en, path: '{tmp_path / 'en.txt'}'}}]")
    mined = mine(pipeline_config(tmp_path, template, uri, "mine.model=champion", inputs, "mine.threshold=1.0",
                                 "mine.max_hub=1000"))
    (pair,) = mined.pairs
    assert len(pair.kept) > 0

    sources = (f"prepare.sources=[{{kind: text, path: '{template}', languages: {LANGS}}}, "
               f"{{kind: mined, path: '{mined.out_dir}', languages: [fr, en], min_score: 1.0}}]")
    retrained = run_pipeline(pipeline_config(tmp_path, template, uri, sources))
    assert retrained.stages == dict.fromkeys(["prepare", "train", "evaluate", "register"], "ran")
    counts = json.loads(manifest.read_text())["counts"]["tuples"]
    assert counts["in"] == tuples_before + len(pair.kept)  # every mined pair reached prepare
    assert "below_min_score" not in counts["dropped"]
    promoted = retrained.challenger_error < retrained.champion_error
    assert retrained.code == (Exit.OK if promoted else Exit.NOT_PROMOTED), retrained.message
