"""The `interlingua` command line, as a user runs it."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest
import yaml

from orchestration.cli import main
from tests.support.corpus import SMALL_BOOKS


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestration.cli", *args], capture_output=True, text=True, timeout=600
    )


def test_help_lists_the_commands():
    out = run_cli("--help")
    assert out.returncode == 0
    assert "prepare" in out.stdout and "config" in out.stdout
    prep = run_cli("prepare", "--help")
    assert prep.returncode == 0 and "--workers" in prep.stdout and "KEY=VALUE" in prep.stdout
    train = run_cli("train", "--help")
    assert train.returncode == 0 and "--force" in train.stdout and "resumes" in train.stdout


def test_config_prints_the_resolved_config(capsys):
    assert main(["config", "prepare.spm.vocab_size=8000"]) == 0
    resolved = yaml.safe_load(capsys.readouterr().out)
    assert resolved["prepare"]["spm"]["vocab_size"] == 8000
    assert resolved["prepare"]["filters"]["max_words"] == 50


@pytest.mark.parametrize("users", [None, "false"])
def test_commands_ask_mlflow_for_no_telemetry_unless_the_user_set_it(users, monkeypatch, capsys):
    if users is None:
        monkeypatch.delenv("MLFLOW_DISABLE_TELEMETRY", raising=False)
    else:
        monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", users)
    assert main(["config"]) == 0
    from mlflow.environment_variables import MLFLOW_DISABLE_TELEMETRY

    assert MLFLOW_DISABLE_TELEMETRY.get() is (users is None)  # MLflow's own reading of the variable


def test_user_errors_exit_2_with_a_message_and_no_traceback(tmp_path, capsys):
    assert main(["config", "prepare.spm.vocab_sise=8000"]) == 2
    err = capsys.readouterr().err
    assert "prepare.spm.vocab_sise: unknown key" in err and "Traceback" not in err
    (tmp_path / "c.en").write_text("In the beginning.\n")
    code = main(
        [
            "prepare",
            f"run_dir={tmp_path / 'run'}",
            f"prepare.sources=[{{kind: text, path: '{tmp_path}/c.{{lang}}', languages: [en, fr]}}]",
        ]
    )
    assert code == 2
    assert f"{tmp_path}/c.fr: file not found" in capsys.readouterr().err


@pytest.mark.beam
def test_prepare_end_to_end_with_overrides_and_beam_flags(tmp_path):
    args = [
        "prepare",
        f"run_dir={tmp_path / 'run'}",
        f"prepare.sources=[{{kind: bible, books: {SMALL_BOOKS}}}]",
        "prepare.split.dev_size=20",
        "prepare.split.test_size=20",
        "prepare.spm.vocab_size=1500",
        "--direct_runner_bundle_repeat",
        "0",
    ]  # any Beam flag, with a separate value, passes through
    out = run_cli(*args)
    assert out.returncode == 0, out.stderr
    assert "tuples read 231" in out.stdout and "dropped" in out.stdout
    manifest = json.loads((tmp_path / "run" / "data" / "manifest.json").read_text())
    assert manifest["splits"]["dev"]["tuples"] == 20
    again = run_cli(*args)
    assert "already up to date" in again.stdout


def test_train_without_a_dataset_says_to_prepare_first(tmp_path, capsys):
    assert main(["train", f"run_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert "no manifest.json" in err and "interlingua prepare" in err and "Traceback" not in err
    assert main(["train", "train.paths=[{kind: '2:2'}]"]) == 2
    assert "train.paths.0.kind" in capsys.readouterr().err


# every command that talks to the tracking store, with what it needs besides the store to start its work
STORE_COMMANDS = {
    "train": [],
    "evaluate": ["--model", "{model}"],
    "run": [],
    "tune": ["--space", "{space}"],
    "compare": [],
    "serve": [],
    "mine": [
        "mine.inputs=[{{lang: en, path: '{en}'}}, {{lang: fr, path: '{fr}'}}]",
        "mine.model={model}",
        "mine.threshold=1.0",
    ],
}


@pytest.mark.parametrize("command", sorted(STORE_COMMANDS))
def test_an_unreachable_tracking_server_fails_every_command_before_any_work(
    command, small_dataset, book_lines, tmp_path, capsys, monkeypatch
):
    import ray

    from tests.support.corpus import write_lines
    from tests.support.procs import free_ports
    from tests.support.runs import untrained_model_dir

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was started before the tracking store was checked")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # whatever an earlier test left running
    monkeypatch.setattr(ray, "init", no_ray)
    lines = book_lines({"en": "k", "fr": "l"}, [57])  # Philemon
    files = {
        "model": untrained_model_dir(small_dataset, tmp_path / "model"),
        "en": write_lines(tmp_path / "en.txt", lines["en"]),
        "fr": write_lines(tmp_path / "fr.txt", lines["fr"]),
        "space": tmp_path / "space.yaml",
    }
    files["space"].write_text("space:\n  train.lr: {loguniform: [0.001, 0.01]}\nnum_samples: 2\n")
    (port,) = free_ports(1)
    run_dir = tmp_path / "run"
    args = [a.format(**files) for a in STORE_COMMANDS[command]]
    assert (
        main(
            [
                command,
                *args,
                f"run_dir={run_dir}",
                f"dataset_dir={small_dataset.data_dir}",
                "prepare.spm.vocab_size=2000",
                f"tracking.uri=http://127.0.0.1:{port}",
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"interlingua {command}: error: MLflow tracking store http://127.0.0.1:{port} "
        f"is unreachable: {err.split('unreachable: ', 1)[-1].strip()}"
    ], err
    assert not run_dir.exists() or [p.name for p in run_dir.iterdir()] == [], "work was done"


def test_compare_refuses_impossible_options_before_any_work(tmp_path, capsys):
    assert main(["compare", "--max-runs", "0"]) == 2
    assert "--max-runs 0" in capsys.readouterr().err
    assert main(["compare", "--plot", str(tmp_path / "missing" / "c.png")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_every_command_help_shows_an_example(capsys):
    from orchestration.cli import parser

    commands = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert {"prepare", "train", "evaluate", "search", "embed", "run", "compare", "tune", "mine", "config"} <= set(
        commands
    )
    for name in commands:
        with pytest.raises(SystemExit):
            main([name, "--help"])
        lines = capsys.readouterr().out.splitlines()
        example = lines[lines.index("Example:") + 1].strip()  # ValueError: no example
        assert example.startswith(f"interlingua {name} "), (name, example)
