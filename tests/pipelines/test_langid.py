"""The `wrong_language` filter on real Bible text: normal verses pass, a swapped column is caught and counted."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from core.normalize import NormalizeConfig
from orchestration.config import ConfigError, load_config
from pipelines.clean import WRONG_LANGUAGE, Cleaner
from pipelines.config import FilterConfig, LanguageIdConfig
from pipelines.langid import LanguageCheck, unchecked_languages
from pipelines.prepare import run_prepare
from pipelines.runners import pipeline_options
from tests.support.corpus import SMALL_BOOKS, VERSIONS, write_lines

ON = LanguageIdConfig(enabled=True)


def drops(book_lines, columns: dict[str, str], config: LanguageIdConfig = ON) -> tuple[int, Counter]:
    """Clean the small books with `columns` {lang: version}: (tuples, {(lang, reason): n})."""
    texts = book_lines(columns, SMALL_BOOKS)
    cleaner = Cleaner(NormalizeConfig(), FilterConfig(language_id=config))
    counts: Counter = Counter()
    n = len(next(iter(texts.values())))
    for i in range(n):
        _, dropped, _ = cleaner.clean_tuple({lang: texts[lang][i] for lang in columns})
        counts.update(dropped.items())
    return n, counts


def test_real_verses_of_six_languages_pass(book_lines):
    n, counts = drops(book_lines, VERSIONS)
    wrong = {lang: counts[(lang, WRONG_LANGUAGE)] for lang in VERSIONS}
    assert n == 231
    assert sum(wrong.values()) <= 6, wrong  # at most 0.5 % of 1,386 verses (measured: 4)
    assert all(v <= 2 for v in wrong.values()), wrong


def test_french_in_the_spanish_column_is_caught(book_lines):
    n, counts = drops(book_lines, {"en": "k", "es": "l"})  # Segond's French where Spanish should be
    spanish = {reason: k for (lang, reason), k in counts.items() if lang == "es"}
    assert spanish[WRONG_LANGUAGE] >= 0.98 * (n - sum(spanish.values()) + spanish[WRONG_LANGUAGE])
    assert counts[("en", WRONG_LANGUAGE)] == 0


def test_a_threshold_per_language(book_lines, verse):
    _, off = drops(book_lines, {"en": "k", "es": "l"}, LanguageIdConfig(enabled=True, thresholds={"es": 0.0}))
    assert off[("es", WRONG_LANGUAGE)] == 0
    check = LanguageCheck(ON)
    french = verse("l", 8, 1, 16).lower()
    assert check.probability(french, "fr") > 0.9 and check.probability(french, "es") < 0.01
    assert check.is_wrong(french, "es") and not check.is_wrong(french, "fr")
    assert check.probability(french, "xx") is None and not check.is_wrong(french, "xx")
    assert unchecked_languages(["en", "zh_Hant", "xx"]) == ["xx"]


def test_config_rejects_bad_thresholds_and_unknown_keys():
    with pytest.raises(ConfigError, match="not a probability"):
        load_config(None, ["prepare.filters.language_id.thresholds={es: 1.5}"])
    with pytest.raises(ConfigError, match="min_prob"):
        load_config(None, ["prepare.filters.language_id.min_prob=0.1"])
    config = load_config(None, ["prepare.filters.language_id.thresholds={zh: 0.2}"])
    assert not config.prepare.filters.language_id.enabled  # off unless asked for: it costs time
    assert config.prepare.filters.language_id.threshold("zh") == 0.2
    assert config.prepare.filters.language_id.threshold("en") == 0.05


@pytest.mark.beam
def test_prepare_counts_wrong_language_drops_in_the_manifest(tmp_path, book_lines):
    texts = book_lines({"en": "k", "fr": "l", "es": "v"}, SMALL_BOOKS)
    swapped = 100  # the first 100 Spanish lines hold the French verses
    texts["es"] = texts["fr"][:swapped] + texts["es"][swapped:]
    for lang, lines in texts.items():
        write_lines(tmp_path / f"c.{lang}", lines)
    config = load_config(
        None,
        [
            f"run_dir={tmp_path / 'run'}",
            f"prepare.sources=[{{kind: text, path: '{tmp_path}/c.{{lang}}', languages: [en, fr, es]}}]",
            "prepare.split.dev_size=20",
            "prepare.split.test_size=20",
            "prepare.spm.vocab_size=1000",
            "prepare.filters.language_id.enabled=true",
        ],
    )
    result = run_prepare(config.prepare, config.data_dir, options=pipeline_options([]))
    sentences = result.manifest.dump()["counts"]["sentences"]
    assert 98 <= sentences["es"]["dropped"][WRONG_LANGUAGE] <= 101
    assert sentences["fr"]["dropped"].get(WRONG_LANGUAGE, 0) <= 2
    stats = json.loads((tmp_path / "run" / "data" / "manifest.json").read_text())["counts"]
    assert stats["sentences"]["es"]["dropped"][WRONG_LANGUAGE] == sentences["es"]["dropped"][WRONG_LANGUAGE]
