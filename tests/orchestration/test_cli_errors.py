"""Every user error of the command line: exit 2 with one line naming the key, flag or path and what to do,
found before any work; and the odd inputs that are accepted say so. Real Bible verses, tiny models."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from core.errors import Exit
from orchestration.cli import main
from tests.support.corpus import write_lines
from tests.support.runs import untrained_model_dir

BIBLE = ["prepare.sources=[{kind: bible, books: [8]}]", "prepare.split.dev_size=5", "prepare.split.test_size=5"]


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("interlingua")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_source_with_no_languages_is_a_config_error(tmp_path, capsys):
    source = f"prepare.sources=[{{kind: text, path: '{tmp_path}/c.{{lang}}', languages: []}}]"
    assert main(["prepare", f"run_dir={tmp_path / 'run'}", source]) == 2
    err = capsys.readouterr().err
    assert "prepare.sources.0.languages" in err and "no languages" in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["prepare", "run"])
def test_an_unknown_beam_runner_is_refused_before_any_work(tmp_path, capsys, command):
    run_dir = tmp_path / "run"
    assert (
        main(
            [
                command,
                "--runner=NoSuchRunner",
                f"run_dir={run_dir}",
                f"tracking.uri=sqlite:///{tmp_path / 'm.db'}",
                *BIBLE,
            ]
        )
        == 2
    )
    assert error_line(capsys).startswith(f"interlingua {command}: error: --runner=NoSuchRunner: Unexpected")
    assert not (run_dir / "data").exists() and not list(run_dir.glob(".data.partial-*"))


@pytest.mark.parametrize("command", ["prepare", "train", "evaluate", "run"])
def test_a_run_dir_that_is_a_file_or_cannot_be_created_is_named(tmp_path, capsys, command):
    afile = tmp_path / "afile"
    afile.write_text("not a directory\n")
    assert main([command, f"run_dir={afile}", *BIBLE]) == 2
    assert f"run_dir: {afile} is a file, not a directory" in error_line(capsys)
    assert main([command, f"run_dir={afile}/run", *BIBLE]) == 2  # under a file: cannot be made
    assert f"run_dir: cannot write in {afile}/run" in error_line(capsys)
    assert main([command, "run_dir=/proc/interlingua/run", *BIBLE]) == 2  # a filesystem that takes no files
    assert "run_dir: cannot write in /proc/interlingua/run" in error_line(capsys)


@pytest.fixture
def model(small_dataset, tmp_path):
    return untrained_model_dir(small_dataset, tmp_path / "model")


def test_embed_into_a_missing_directory_is_refused_before_embedding(model, tmp_path, verse, capsys, monkeypatch):
    from orchestration.embedding.embedder import SentenceEmbedder

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the output was checked")

    monkeypatch.setattr(SentenceEmbedder, "load", no_model)
    text = write_lines(tmp_path / "ruth.en", [verse("k", 8, 1, n) for n in range(1, 6)])
    assert (
        main(
            ["embed", "--model", str(model), "-l", "en", "-i", str(text), "-o", str(tmp_path / "missing" / "ruth.npy")]
        )
        == 2
    )
    assert f"directory {tmp_path / 'missing'} does not exist" in error_line(capsys)


def test_embedding_empty_lines_warns_with_their_count_and_all_empty_is_refused(model, tmp_path, verse, capsys, caplog):
    lines = [verse("k", 8, 1, 1), "", verse("k", 8, 1, 2), ""]
    text = write_lines(tmp_path / "ruth.en", lines)
    with caplog.at_level(logging.WARNING):
        assert main(["embed", "--model", str(model), "-l", "en", "-i", str(text), "-o", str(tmp_path / "e.npy")]) == 0
    assert "4 sentences (2 empty)" in capsys.readouterr().out
    assert "2 of 4 lines are empty" in caplog.text
    vectors = np.load(tmp_path / "e.npy")
    assert np.array_equal(vectors[1], vectors[3]) and not np.array_equal(vectors[0], vectors[1])
    write_lines(tmp_path / "blank.en", ["", "", ""])
    assert (
        main(
            [
                "embed",
                "--model",
                str(model),
                "-l",
                "en",
                "-i",
                str(tmp_path / "blank.en"),
                "-o",
                str(tmp_path / "b.npy"),
            ]
        )
        == 2
    )
    assert "all 3 input lines are empty: nothing to embed" in error_line(capsys)
    assert not (tmp_path / "b.npy").exists()


def test_search_refuses_an_empty_query(small_dataset, model, capsys):
    assert (
        main(
            [
                "search",
                "--model",
                str(model),
                "-q",
                "  ",
                "-l",
                "fr",
                f"dataset_dir={small_dataset.data_dir}",
                "prepare.spm.vocab_size=2000",
            ]
        )
        == 2
    )
    assert "--query is empty" in error_line(capsys)


def test_an_unknown_language_code_is_accepted_with_a_warning_that_no_script_check_applies(caplog):
    from orchestration.config import load_config
    from pipelines.prepare import warn_unchecked_scripts

    config = load_config(None, ["prepare.sources=[{kind: bible, books: [8], versions: {en: k, xx: l}}]"])
    with caplog.at_level(logging.WARNING):
        assert warn_unchecked_scripts(config.prepare) == ["xx"]
    assert "language 'xx': no script known for it" in caplog.text and "prepare.filters.scripts.xx" in caplog.text
    named = load_config(
        None,
        [
            "prepare.sources=[{kind: bible, books: [8], versions: {en: k, xx: l}}]",
            "prepare.filters.scripts={xx: [Latin]}",
        ],
    )
    assert warn_unchecked_scripts(named.prepare) == []


@pytest.mark.beam
def test_a_dev_split_without_complete_tuples_is_refused_before_training_not_a_nan_dev_error(
    tmp_path, book_lines, capsys, monkeypatch
):
    asked = []  # `ensure_ray`, the one way a command starts or joins Ray (the run's shared one may be up)
    monkeypatch.setattr("orchestration.train.driver.ensure_ray", lambda *args, **kwargs: asked.append(args))
    ruth, jonah = book_lines({"en": "k", "fr": "l"}, [8]), book_lines({"en": "k", "es": "v"}, [32])
    for name, lines in (("ruth", ruth), ("jonah", jonah)):
        for lang, texts in lines.items():
            write_lines(tmp_path / f"{name}.{lang}", texts)
    where = [
        f"run_dir={tmp_path / 'run'}",
        f"tracking.uri=sqlite:///{tmp_path / 'm.db'}",
        f"prepare.sources=[{{kind: text, path: '{tmp_path}/ruth.{{lang}}', languages: [en, fr]}}, "
        f"{{kind: text, path: '{tmp_path}/jonah.{{lang}}', languages: [en, es]}}]",
        "prepare.split.dev_size=10",
        "prepare.split.test_size=10",
        "prepare.spm.vocab_size=500",
        "prepare.split.heldout_complete=false",
        "model.embed_dim=16",
        "model.encoder_hidden=16",
        "model.decoder_hidden=16",
    ]
    assert main(["prepare", *where]) == 0  # bitexts: no dev tuple holds en, fr and es together
    capsys.readouterr()
    assert main(["train", *where]) == 2
    line = error_line(capsys)
    assert "the dev split has 0 tuple(s) with every one of ['en', 'fr', 'es']" in line
    assert "heldout_complete=true" in line and asked == []


def test_a_full_disk_is_one_line_naming_the_file_not_a_traceback(monkeypatch, capsys):
    import errno

    from orchestration.cli import tools

    def full(config, args):
        raise OSError(errno.ENOSPC, "No space left on device", "/data/out/fr/part-00001.npy")

    monkeypatch.setattr(tools, "show_config", full)
    assert main(["config"]) == Exit.FAILED
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no space left" in err[0] and "/data/out/fr/part-00001.npy" in err[0], err
    monkeypatch.setattr(tools, "show_config", lambda config, args: (_ for _ in ()).throw(OSError(errno.EIO, "I/O")))
    with pytest.raises(OSError):  # any other OSError is not dressed up as a full disk
        main(["config"])


def test_a_failure_after_the_run_lock_was_taken_over_is_the_lost_lease_stop_and_any_other_is_raised(
    monkeypatch, capsys
):
    """A holder whose lease another host took over may fail in what it was doing (Ray Train's controller deleting
    a checkpoint the new holder pruned): that is the lease's stop, exit 130 in one line; without a lost lease the
    same failure is a traceback."""
    from orchestration.adapters import lease
    from orchestration.cli import tools

    def fails(config, args):
        lease._LOST.append("s3://bucket/runs/paused/.lock")  # what the fence records when it finds it taken over
        raise RuntimeError("Path not found: bucket/runs/paused/train/ray-0/checkpoint_0")

    monkeypatch.setattr(tools, "show_config", fails)
    assert main(["config"]) == Exit.INTERRUPTED
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"interlingua config: stopped: {lease.LeaseLost.REASON}; this command commits nothing more"], err
    monkeypatch.setattr(tools, "show_config", lambda config, args: (_ for _ in ()).throw(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):
        main(["config"])
