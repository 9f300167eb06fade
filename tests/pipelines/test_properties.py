"""Property-based tests (hypothesis) of the sources, the cleaner and the config over hostile input:
each input gives a clear error naming what is wrong, or records that are all accounted for."""
from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestration.config import ConfigError, load_config
from pipelines.config import FilterConfig, NormalizeConfig
from pipelines.sources import MALFORMED, SourceError, plan_reads, read_task
from pipelines.clean import Cleaner

LINE_BYTES = st.one_of(
    st.binary(max_size=60).map(lambda b: b.replace(b"\n", b" ")),  # random bytes: invalid UTF-8, NUL, ...
    st.text(max_size=60).map(lambda t: t.replace("\n", " ").replace("\r", " ").encode("utf-8", "surrogatepass")),
    st.just(b"x" * 5000),  # a very long line
)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def write(folder: Path, lang: str, lines: list[bytes], *, bom: bool, crlf: bool, final_newline: bool) -> None:
    eol = b"\r\n" if crlf else b"\n"
    # without a final newline, a last empty line does not exist in the file: always end those
    final_newline = final_newline or (bool(lines) and lines[-1].rstrip(b"\r") == b"")
    body = eol.join(lines) + (eol if final_newline and lines else b"")
    (folder / f"c.{lang}").write_bytes((b"\xef\xbb\xbf" if bom and lines else b"") + body)


def text_config(folder: Path, languages: list[str], chunk: int):
    return load_config(None, [
        f"prepare.sources=[{{kind: text, path: '{folder}/c.{{lang}}', languages: {languages}, name: c}}]",
        f"prepare.output.read_chunk_lines={chunk}",
    ]).prepare


@SETTINGS
@given(
    files=st.lists(st.lists(LINE_BYTES, max_size=12), min_size=2, max_size=3),
    bom=st.booleans(), crlf=st.booleans(), final_newline=st.booleans(), chunk=st.integers(1, 5),
)
def test_text_sources_error_clearly_or_account_for_every_line(files, bom, crlf, final_newline, chunk):
    languages = ["en", "fr", "ru"][: len(files)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for lang, lines in zip(languages, files):
            write(folder, lang, lines, bom=bom, crlf=crlf, final_newline=final_newline)
        config = text_config(folder, languages, chunk)
        counts = {len(lines) for lines in files}
        try:
            plan = plan_reads(config)
        except SourceError as exc:
            message = str(exc)
            if len(counts) > 1:  # mismatched line counts: every file and its count named
                assert all(f"c.{lang}: {len(f)} lines" in message for lang, f in zip(languages, files))
            else:
                assert counts == {0} and "empty" in message
            return
        assert len(counts) == 1 and counts != {0}
        records = [kv for task in plan.tasks for kv in read_task(task)]
        (n,) = counts
        assert [key for key, _ in records] == [f"c:{i}" for i in range(1, n + 1)]  # none lost, none added
        for _, record in records:
            assert set(record) == set(languages)
            for text in record.values():
                assert text is None or ("\n" not in text and not text.endswith("\r") and "\ufeff" not in text[:1])


@SETTINGS
@given(lines=st.lists(LINE_BYTES, min_size=1, max_size=10))
def test_tsv_rows_parse_or_are_counted_malformed(lines):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.tsv"
        path.write_bytes(b"en\tfr\n" + b"\n".join(lines) + b"\n")
        config = load_config(None, [f"prepare.sources=[{{kind: tsv, path: '{path}', languages: [en, fr]}}]"])
        plan = plan_reads(config.prepare)
        records = [rec for task in plan.tasks for _, rec in read_task(task)]
        assert len(records) == len(lines)
        for rec, raw in zip(records, lines):
            assert rec == MALFORMED if b"\t" not in raw else set(rec) == {"en", "fr"}


@SETTINGS
@given(st.dictionaries(st.sampled_from(["en", "fr", "ru", "ar", "zh"]),
                       st.one_of(st.none(), st.text(max_size=200)), min_size=1))
def test_cleaner_keeps_or_drops_every_sentence_with_a_reason(sentences):
    kept, dropped, _ = Cleaner(NormalizeConfig(), FilterConfig()).clean_tuple(sentences)
    assert set(kept) | set(dropped) == set(sentences) and not set(kept) & set(dropped)
    assert all(isinstance(reason, str) and reason for reason in dropped.values())
    assert all(text == text.strip() and text for text in kept.values())


KEYS = ["prepare.spm.vocab_size", "prepare.split.dev_size", "train.max_tokens", "train.lr", "model.dropout",
        "model.encoder", "evaluate.shards", "train.paths", "prepare.filters.max_words", "tracking.uri"]


@SETTINGS
@given(key=st.sampled_from(KEYS + ["prepare.spm.vocab_sise", "train.nope", "model"]),
       value=st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=True), st.text(max_size=20),
                       st.booleans(), st.lists(st.integers(), max_size=3)))
def test_any_override_is_accepted_or_refused_with_the_key_named(key, value):
    try:
        load_config(None, [f"{key}={value!r}" if isinstance(value, str) else f"{key}={value}"])
    except ConfigError as exc:
        assert key.split(".")[0] in str(exc)
