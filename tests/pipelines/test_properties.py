"""Property-based tests (hypothesis) of the sources, the cleaner and the config over hostile input:
each input gives a clear error naming what is wrong, or exactly the records, sentences or config
values it holds."""

from __future__ import annotations

import math
import tempfile
import unicodedata
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import regex
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.normalize import NormalizeConfig
from core.schema import YamlDumper, dump_yaml
from orchestration.config import ConfigError, load_config
from orchestration.config.yaml_file import load_yaml
from pipelines import clean
from pipelines.clean import Cleaner
from pipelines.config import FilterConfig
from pipelines.sources import MALFORMED, SourceError, plan_reads, read_task

LINE_BYTES = st.one_of(
    st.binary(max_size=60).map(lambda b: b.replace(b"\n", b" ")),  # random bytes: invalid UTF-8, NUL, ...
    st.text(max_size=60).map(lambda t: t.replace("\n", " ").replace("\r", " ").encode("utf-8", "surrogatepass")),
    st.just(b"x" * 5000),  # a very long line
)
REASONS = {
    clean.INVALID_UTF8,
    clean.EMPTY,
    clean.TOO_SHORT,
    clean.TOO_LONG,
    clean.LENGTH_RATIO,
    clean.URL_EMAIL,
    clean.WRONG_SCRIPT,
}
WORD_CHAR = regex.compile(r"[\p{L}\p{N}]")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def write(folder: Path, lang: str, lines: list[bytes], *, bom: bool, crlf: bool, final_newline: bool) -> None:
    eol = b"\r\n" if crlf else b"\n"
    # without a final newline, a last empty line does not exist in the file: always end those
    final_newline = final_newline or (bool(lines) and lines[-1].rstrip(b"\r") == b"")
    body = eol.join(lines) + (eol if final_newline and lines else b"")
    (folder / f"c.{lang}").write_bytes((b"\xef\xbb\xbf" if bom and lines else b"") + body)


def decoded(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def line_text(raw: bytes, *, first: bool, bom: bool) -> str | None:
    """What a reader must make of one written line: its line end (LF, CRLF, stray CRs before
    it) gone, a byte-order mark opening the file gone, decoded, or None if not UTF-8."""
    if first and not bom:
        raw = raw.removeprefix(b"\xef\xbb\xbf")  # a line that opens the file with one reads as a BOM
    return decoded(raw.rstrip(b"\r"))


def text_config(folder: Path, languages: list[str], chunk: int):
    return load_config(
        None,
        [
            f"prepare.sources=[{{kind: text, path: '{folder}/c.{{lang}}', languages: {languages}, name: c}}]",
            f"prepare.output.read_chunk_lines={chunk}",
        ],
    ).prepare


@SETTINGS
@given(
    files=st.lists(st.lists(LINE_BYTES, max_size=12), min_size=2, max_size=3),
    bom=st.booleans(),
    crlf=st.booleans(),
    final_newline=st.booleans(),
    chunk=st.integers(1, 5),
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
        for i, (_, record) in enumerate(records):
            assert record == {lang: line_text(f[i], first=i == 0, bom=bom) for lang, f in zip(languages, files)}


# rows of one to three cells (one: malformed); cells with spaces around them, invalid UTF-8, CRs ...
CELL = st.one_of(st.binary(max_size=20), st.text(max_size=20).map(lambda t: t.encode("utf-8", "surrogatepass")))
PADDED_CELL = st.tuples(st.sampled_from([b"", b" "]), CELL, st.sampled_from([b"", b" ", b"\r"])).map(
    lambda parts: b"".join(parts).replace(b"\n", b" ").replace(b"\t", b" ")
)
TSV_ROWS = st.one_of(LINE_BYTES, st.lists(PADDED_CELL, min_size=1, max_size=3).map(b"\t".join))


@SETTINGS
@given(lines=st.lists(TSV_ROWS, min_size=1, max_size=10))
def test_tsv_rows_parse_or_are_counted_malformed(lines):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.tsv"
        path.write_bytes(b"en\tfr\n" + b"\n".join(lines) + b"\n")
        config = load_config(None, [f"prepare.sources=[{{kind: tsv, path: '{path}', languages: [en, fr]}}]"])
        plan = plan_reads(config.prepare)
        records = [rec for task in plan.tasks for _, rec in read_task(task)]
        assert len(records) == len(lines)
        for rec, raw in zip(records, lines):
            cells = raw.rstrip(b"\r").split(b"\t")
            assert rec == (MALFORMED if len(cells) < 2 else {"en": decoded(cells[0]), "fr": decoded(cells[1])})


@SETTINGS
@given(
    st.dictionaries(
        st.sampled_from(["en", "fr", "ru", "ar", "zh"]), st.one_of(st.none(), st.text(max_size=200)), min_size=1
    )
)
def test_cleaner_keeps_or_drops_every_sentence_with_a_reason(sentences):
    kept, dropped, _ = Cleaner(NormalizeConfig(), FilterConfig()).clean_tuple(sentences)
    assert set(kept) | set(dropped) == set(sentences) and not set(kept) & set(dropped)
    assert set(dropped.values()) <= REASONS
    assert {lang for lang, r in dropped.items() if r == clean.INVALID_UTF8} == {
        lang for lang, text in sentences.items() if text is None
    }
    for text in kept.values():
        assert text == text.strip() and WORD_CHAR.search(text)  # else it is EMPTY
        assert all(c == " " or not c.isspace() for c in text)  # every space is U+0020
        assert not any(unicodedata.category(c) in ("Cc", "Cf") and c not in "\u200c\u200d" for c in text)
        assert text == text.lower()


# Letters of each script, and text already normalized: lowercase, single spaces, NFKC-stable.
LETTERS = {
    "en": "abcdefghijklmnopqrstuvwxyz",
    "fr": "abcdefghijklmnopqrstuvwxyzàâçéèêëîïôûùü",
    "ru": "абвгдежзийклмнопрстуфхцчшщъыьэюя",
    "ar": "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
}
HAN = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年"


@SETTINGS
@given(langs=st.sets(st.sampled_from([*LETTERS, "zh"]), min_size=1), n=st.integers(1, 50), data=st.data())
def test_clean_text_in_its_own_script_is_kept_unchanged(langs, n, data):
    """n words per language (n characters in Chinese): within every length limit and ratio."""
    sentences = {}
    for lang in sorted(langs):
        if lang == "zh":
            sentences[lang] = data.draw(st.text(HAN, min_size=n, max_size=n), label=lang)
        else:
            words = data.draw(
                st.lists(st.text(LETTERS[lang], min_size=1, max_size=8), min_size=n, max_size=n), label=lang
            )
            sentences[lang] = " ".join(words)
    assert Cleaner(NormalizeConfig(), FilterConfig()).clean_tuple(sentences) == (sentences, {}, {})


class Field(NamedTuple):
    """What a config key's schema accepts and refuses (wrong type or out of range), and its
    edges: (value, accepted) at each bound, the bound itself and the nearest value past it."""

    valid: st.SearchStrategy
    invalid: st.SearchStrategy
    edges: list[tuple[Any, bool]]


STRINGS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=20)
LISTS = st.lists(st.integers(), max_size=3)
# strict schema: no coercion from bool or str to a number, nor from a number to bool;
# floats are refused for int keys even when whole (3.0), ints accepted for float keys
NOT_NUMBER = st.one_of(st.booleans(), STRINGS, LISTS)
NOT_INT = st.one_of(NOT_NUMBER, st.floats(allow_nan=False))


def ints(low: int | None, *, valid: st.SearchStrategy | None = None, nullable: bool = False) -> Field:
    """An int key that must be at least `low`, if given (no int key has an upper bound).

    `nullable`: its type allows null, which only a rule on the whole section can refuse.
    """
    if valid is None:
        valid = st.integers(-(2**40) if low is None else low, 2**40)
    below = st.nothing() if low is None else st.integers(max_value=low - 1)
    edges = [] if low is None else [(low, True), (low - 1, False), (float(low), False)]
    return Field(valid, st.one_of(NOT_INT, below, st.nothing() if nullable else st.none()), edges)


def floats(
    low: float, high: float | None = None, *, open_low: bool = False, open_high: bool = False, nullable: bool = False
) -> Field:
    """A float key between low and high (open or closed ends; no upper end when None); null if `nullable`.

    Infinities are left out of the valid values: the resolved config (JSON) would write them as null.
    """
    valid = st.floats(low, high, exclude_min=open_low, exclude_max=open_high, allow_nan=False, allow_infinity=False)
    below = st.floats(max_value=low, exclude_max=not open_low, allow_nan=False)
    above = st.nothing() if high is None else st.floats(min_value=high, exclude_min=not open_high, allow_nan=False)
    edges = [(low, not open_low), (math.nextafter(low, -math.inf if not open_low else math.inf), open_low)]
    if high is not None:
        edges += [(high, not open_high), (math.nextafter(high, math.inf if not open_high else -math.inf), open_high)]
    return Field(
        st.one_of(valid, st.none()) if nullable else valid,
        st.one_of(NOT_NUMBER, below, above, st.nothing() if nullable else st.none()),
        edges + [(None, nullable), (True, False), ("0.5", False)],
    )


BOOL = Field(
    st.booleans(),
    st.one_of(st.integers(), st.floats(allow_nan=False), STRINGS, LISTS, st.none()),
    [(True, True), (False, True), (1, False), (0, False), ("yes", False)],
)

# Every scalar key under prepare. (but split's fractions, valid only as a pair), and the three
# model and train keys that keep their names. Bounds are the schema's.
FIELDS: dict[str, Field] = {
    "prepare.normalize.nfkc": BOOL,
    "prepare.normalize.lowercase": BOOL,
    "prepare.filters.min_words": ints(0),
    "prepare.filters.max_words": ints(1),
    "prepare.filters.max_cjk_chars": ints(1),
    "prepare.filters.min_cjk_chars": ints(0),
    "prepare.filters.max_length_ratio": floats(1.0, nullable=True),
    "prepare.filters.drop_urls": BOOL,
    "prepare.filters.min_script_fraction": floats(0.0, 1.0),
    "prepare.filters.min_languages": ints(1),
    "prepare.dedup.near_duplicates": BOOL,
    # bands (16 by default) must divide num_perm: valid values respect that, invalid ones fail alone
    "prepare.dedup.num_perm": ints(8, valid=st.integers(1, 2**20).map(lambda k: 16 * k))._replace(
        edges=[(16, True), (7, False), (16.0, False)]
    ),
    "prepare.dedup.bands": ints(1, valid=st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128])),
    "prepare.dedup.threshold": floats(0.0, 1.0, open_low=True),
    "prepare.dedup.shingle_chars": ints(1),
    "prepare.split.seed": ints(None),
    # null sizes are for dev_fraction/test_fraction: refused with the section named, not the key
    "prepare.split.dev_size": ints(0, nullable=True),
    "prepare.split.test_size": ints(0, nullable=True),
    "prepare.split.heldout_complete": BOOL,
    "prepare.spm.vocab_size": ints(100),
    "prepare.spm.sample_sentences": ints(100),
    "prepare.spm.temperature": floats(1.0),
    "prepare.spm.character_coverage": floats(0.0, 1.0, open_low=True),
    "prepare.spm.num_threads": ints(1),
    "prepare.output.train_shards": ints(1),
    "prepare.output.heldout_shards": ints(1),
    "prepare.output.read_chunk_lines": ints(1),
    "model.dropout": floats(0.0, 1.0, open_high=True),
    "train.lr": floats(0.0, open_low=True),
    "train.max_tokens": ints(1),
}
CONFIG_SETTINGS = settings(SETTINGS, max_examples=300)  # ten draws per key; a config loads in a millisecond


def override(key: str, value: Any) -> str:
    """`key=value` with the value written as the product writes a resolved config (1e-05 as 1.0e-05, 'yes' and
    '0E0' quoted: `core.schema.YamlDumper`)."""
    text = yaml.dump(value, Dumper=YamlDumper, default_flow_style=True, width=float("inf"))
    return f"{key}={text.removesuffix(chr(10) + '...' + chr(10)).strip()}"


def lookup(config: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        config = config[part]
    return config


def problems(error: ConfigError) -> list[str]:
    """The lines of a ConfigError message that each name one problem."""
    head, *lines = str(error).splitlines()
    assert head == "invalid configuration:"
    return lines


def assert_accepted(key: str, value: Any) -> None:
    """The override gives the default config with exactly `key` changed to `value`, uncoerced."""
    expected = load_config(None, []).to_dict()
    *parents, last = key.split(".")
    lookup(expected, ".".join(parents))[last] = value
    resolved = load_config(None, [override(key, value)]).to_dict()
    assert resolved == expected
    assert type(lookup(resolved, key)) is type(value)


def assert_refused(key: str, value: Any) -> None:
    """The override raises a ConfigError with one problem, on `key`, from the command line."""
    with pytest.raises(ConfigError) as refused:
        load_config(None, [override(key, value)])
    lines = problems(refused.value)
    assert len(lines) == 1 and lines[0].startswith(f"  {key}: ") and lines[0].endswith(" [command line]")


def key_and(kind: str) -> st.SearchStrategy:
    return st.sampled_from(sorted(FIELDS)).flatmap(lambda k: st.tuples(st.just(k), getattr(FIELDS[k], kind)))


@CONFIG_SETTINGS
@given(key_value=key_and("valid"))
def test_a_valid_override_is_accepted_and_changes_exactly_that_key(key_value):
    assert_accepted(*key_value)


@CONFIG_SETTINGS
@given(key_value=key_and("invalid"))
def test_an_invalid_override_is_refused_naming_the_key(key_value):
    assert_refused(*key_value)


def test_a_string_that_reads_as_a_number_is_written_quoted():
    """A draw of the invalid strings once gave `0E0`: PyYAML's own dumper writes it plain, a config reads it as
    0.0. The resolved config a run writes keeps such a string a string when read back."""
    assert override("model.dropout", "0E0") == "model.dropout='0E0'"
    assert_refused("model.dropout", "0E0")
    assert override("model.dropout", "abc") == "model.dropout=abc"
    config = load_config(None, ["name='1e3'", "model.dropout=1e-1"])
    assert load_yaml(dump_yaml(config.to_dict())) == config.to_dict()
    assert config.name == "1e3" and config.model.dropout == 0.1


@pytest.mark.parametrize("key, value, accepted", [(k, v, ok) for k, f in FIELDS.items() for v, ok in f.edges])
def test_overrides_at_the_schema_bounds(key, value, accepted):
    if accepted:
        assert_accepted(key, value)
    else:
        assert_refused(key, value)


@CONFIG_SETTINGS
@given(key_value=key_and("valid"), suffix=st.integers(0, 99))
def test_a_misspelled_key_is_refused_as_unknown_with_its_name(key_value, suffix):
    key, value = key_value
    misspelled = f"{key}{suffix}"  # no key of the schema ends in a digit
    with pytest.raises(ConfigError) as refused:
        load_config(None, [override(misspelled, value)])
    assert problems(refused.value) == [f"  {misspelled}: unknown key (check its spelling and section) [command line]"]
