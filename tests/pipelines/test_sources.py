"""Sources: reading every format, chunking, and bad input caught before any work starts."""

from __future__ import annotations

import json

import pytest

from orchestration.config import load_config
from pipelines.sources import MALFORMED, SourceError, plan_reads, read_task
from tests.support.corpus import write_lines

BOOKS = [57, 63]  # Philemon, 2 John: 38 verses


def prepare_config(*overrides: str):
    return load_config(None, list(overrides)).prepare


def read_all(config) -> dict:
    plan = plan_reads(config)
    return dict(kv for task in plan.tasks for kv in read_task(task))


@pytest.fixture
def corpus(tmp_path, book_lines):
    lines = book_lines({"en": "k", "fr": "l", "ru": "r"}, BOOKS)
    for lang, texts in lines.items():
        write_lines(tmp_path / f"corpus.{lang}", texts)
    return tmp_path, lines


def test_line_aligned_files_in_chunks(corpus):
    root, lines = corpus
    src = f"prepare.sources=[{{kind: text, path: '{root}/corpus.{{lang}}', languages: [en, fr, ru], name: c}}]"
    whole = read_all(prepare_config(src))
    chunked_config = prepare_config(src, "prepare.output.read_chunk_lines=7")
    assert len(plan_reads(chunked_config).tasks) == 6  # 38 lines in chunks of 7
    assert read_all(chunked_config) == whole
    assert len(whole) == 38
    assert whole["c:1"] == {lang: lines[lang][0] for lang in lines}
    assert whole["c:38"]["ru"] == lines["ru"][37]


def test_crlf_bom_and_invalid_utf8(tmp_path, book_lines):
    lines = book_lines({"en": "k", "fr": "l"}, BOOKS)
    write_lines(tmp_path / "c.en", lines["en"], newline="\r\n")
    raw = ("\ufeff" + "\n".join(lines["fr"]) + "\n").encode()
    raw = raw.replace(lines["fr"][2].encode(), b"\xff\xfe broken " + lines["fr"][2].encode()[:5])
    (tmp_path / "c.fr").write_bytes(raw)
    got = read_all(
        prepare_config(f"prepare.sources=[{{kind: text, path: '{tmp_path}/c.{{lang}}', languages: [en, fr], name: c}}]")
    )
    assert got["c:1"] == {"en": lines["en"][0], "fr": lines["fr"][0]}  # no \r, no BOM
    assert got["c:3"]["fr"] is None  # invalid UTF-8: counted as a drop downstream


def test_tsv_and_jsonl(tmp_path, book_lines):
    lines = book_lines({"en": "k", "es": "v"}, BOOKS)
    rows = ["english\tes\tnote"] + [f"{e}\t{s}\tx" for e, s in zip(lines["en"], lines["es"])]
    rows.insert(5, "only one column")
    write_lines(tmp_path / "c.tsv", rows)
    got = read_all(
        prepare_config(
            f"prepare.sources=[{{kind: tsv, path: '{tmp_path}/c.tsv', languages: [en, es], "
            "columns: {en: english}, name: t}]"
        )
    )
    assert got["t:2"] == {"en": lines["en"][0], "es": lines["es"][0]}  # line 1 is the header
    assert got["t:6"] == MALFORMED
    assert len(got) == 39

    records = [json.dumps({"en": e, "es": s}, ensure_ascii=False) for e, s in zip(lines["en"], lines["es"])]
    records[3] = "{not json"
    records[4] = json.dumps({"en": lines["en"][4]})  # a language missing: fine (N <= L)
    write_lines(tmp_path / "c.jsonl", records)
    got = read_all(
        prepare_config(f"prepare.sources=[{{kind: jsonl, path: '{tmp_path}/c.jsonl', languages: [en, es], name: j}}]")
    )
    assert got["j:4"] == MALFORMED
    assert got["j:5"] == {"en": lines["en"][4]}
    assert got["j:1"]["es"] == lines["es"][0]


def test_bible_source_reads_aligned_verses(verse):
    got = read_all(prepare_config("prepare.sources=[{kind: bible, books: [57]}]"))
    assert len(got) == 25
    assert got["bible:57:1:1"]["fr"] == verse("l", 57, 1, 1)
    assert set(got["bible:57:1:1"]) == {"en", "fr", "es", "ru", "ar", "zh"}


def test_mismatched_line_counts_name_files_and_counts(corpus):
    root, lines = corpus
    write_lines(root / "corpus.fr", lines["fr"][:-3])
    src = f"prepare.sources=[{{kind: text, path: '{root}/corpus.{{lang}}', languages: [en, fr]}}]"
    with pytest.raises(SourceError, match=rf"{root}/corpus.en: 38 lines, {root}/corpus.fr: 35 lines"):
        plan_reads(prepare_config(src))


def test_missing_and_unreadable_files(corpus):
    root, _ = corpus
    src = f"prepare.sources=[{{kind: text, path: '{root}/corpus.{{lang}}', languages: [en, de]}}]"
    with pytest.raises(SourceError, match=rf"{root}/corpus.de: file not found"):
        plan_reads(prepare_config(src))
    (root / "corpus.de").mkdir()
    with pytest.raises(SourceError, match=rf"{root}/corpus.de: cannot read"):
        plan_reads(prepare_config(src))


def test_empty_corpus(tmp_path):
    for lang in ("en", "fr"):
        (tmp_path / f"e.{lang}").write_bytes(b"")
    with pytest.raises(SourceError, match="is empty: no records"):
        plan_reads(
            prepare_config(f"prepare.sources=[{{kind: text, path: '{tmp_path}/e.{{lang}}', languages: [en, fr]}}]")
        )


def test_tsv_header_problems(tmp_path):
    write_lines(tmp_path / "a.tsv", ["en\tfr\ten", "a\tb\tc"])
    with pytest.raises(SourceError, match=r"a.tsv:1: header names columns \['en'\] twice"):
        plan_reads(prepare_config(f"prepare.sources=[{{kind: tsv, path: '{tmp_path}/a.tsv', languages: [en, fr]}}]"))
    write_lines(tmp_path / "b.tsv", ["en\tfr", "a\tb"])
    with pytest.raises(SourceError, match=r"b.tsv:1: no column 'de' for language 'de'"):
        plan_reads(prepare_config(f"prepare.sources=[{{kind: tsv, path: '{tmp_path}/b.tsv', languages: [en, de]}}]"))


def test_unknown_bible_version_and_book():
    with pytest.raises(SourceError, match=r"Bible version 'Q' \(for 'en'\)"):
        plan_reads(prepare_config("prepare.sources=[{kind: bible, versions: {en: Q}}]"))
    with pytest.raises(SourceError, match=r"books \[99\]"):
        plan_reads(prepare_config("prepare.sources=[{kind: bible, books: [99]}]"))
