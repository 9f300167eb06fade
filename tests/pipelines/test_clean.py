"""Normalization and every filter, on real Bible verses."""

from __future__ import annotations

import pytest

from core.normalize import NormalizeConfig
from pipelines import clean as T
from pipelines.config import FilterConfig

PSALM_3_1 = (19, 3, 1)
PSALM_3_2 = (19, 3, 2)
JOHN_11_35 = (43, 11, 35)  # "Jesus wept."
ESTHER_8_9 = (17, 8, 9)  # 90 English words, 114 Chinese characters


@pytest.fixture
def normalize():
    return T.Normalizer(NormalizeConfig())


@pytest.fixture
def reason():
    return T.SentenceFilter(FilterConfig()).reason


def test_french_inline_references_removed_and_counted(verse, normalize):
    raw = verse("l", *PSALM_3_1)
    assert raw.startswith("(3:1) Psaume")
    text, matched = normalize(raw, "fr")
    assert "(3:" not in text and text.startswith("psaume de david")
    assert matched == ["inline_reference"]


def test_russian_inline_reference_inside_verse(verse, normalize):
    text, matched = normalize(verse("r", *PSALM_3_1), "ru")
    assert "(3:2)" not in text and "господи!" in text
    assert matched == ["inline_reference"]


def test_chinese_fullwidth_note_removed_after_nfkc(verse, normalize):
    raw = verse("c", *PSALM_3_2)
    assert "（细拉）" in raw and "：" in raw
    text, matched = normalize(raw, "zh")
    assert "细拉" not in text
    assert ":" in text and "：" not in text  # NFKC folds full-width punctuation
    assert matched == ["bracketed_note"]
    # the note pattern is for Chinese only: Spanish "(Selah.)" is text
    es, es_matched = normalize(verse("v", *PSALM_3_2), "es")
    assert "(selah.)" in es and es_matched == []


def test_format_characters_removed_but_joiners_kept(verse, normalize):
    arabic = verse("y", *PSALM_3_1)
    assert "\u200e" in arabic
    assert "\u200e" not in normalize(arabic, "ar")[0]
    spanish = verse("v", *PSALM_3_1)
    assert "\xad" in spanish
    assert "\xad" not in normalize(spanish, "es")[0]
    persian = verse("p", 2, 13, 15)
    assert "\u200c" in persian and "\u200c" in normalize(persian, "fa")[0]


def test_whitespace_control_characters_and_case(verse, normalize):
    raw = "\ufeff  " + verse("k", *JOHN_11_35).replace(" ", "\t\r\n ") + "\x00\x07 "
    assert normalize(raw, "en") == ("jesus wept.", [])
    keep_case = T.Normalizer(NormalizeConfig(lowercase=False))
    assert keep_case(raw, "en")[0] == "Jesus wept."


def test_a_format_character_between_spaces_leaves_one_space(verse, normalize):
    jonah = verse("y", 32, 2, 2)  # Jonah 2:2 in Arabic: "... . \u200e ..."
    assert " \u200e " in jonah
    assert "  " not in normalize(jonah, "ar")[0]


def test_empty_means_no_letters_or_digits(verse, reason):
    assert verse("y", 64, 1, 1) == ":"  # the Arabic verse that is just a colon
    assert reason(":", "ar") == T.EMPTY
    assert reason("", "ar") == T.EMPTY


def test_too_short_and_too_long_in_words(verse, normalize):
    wept = normalize(verse("k", *JOHN_11_35), "en")[0]
    esther = normalize(verse("k", *ESTHER_8_9), "en")[0]
    strict = T.SentenceFilter(FilterConfig(min_words=3)).reason
    assert strict(wept, "en") == T.TOO_SHORT
    default = T.SentenceFilter(FilterConfig()).reason
    assert default(wept, "en") is None
    assert default(esther, "en") == T.TOO_LONG  # 90 words > the paper's 50


def test_chinese_length_counted_in_characters(verse, normalize):
    esther = normalize(verse("c", *ESTHER_8_9), "zh")[0]
    assert len(esther.split()) < 50  # by words it would pass
    assert T.SentenceFilter(FilterConfig()).reason(esther, "zh") == T.TOO_LONG
    assert T.SentenceFilter(FilterConfig(max_cjk_chars=200)).reason(esther, "zh") is None


def test_urls_and_emails(verse, normalize, reason):
    base = normalize(verse("k", *JOHN_11_35), "en")[0]
    assert reason(base + " see https://example.org/x", "en") == T.URL_EMAIL
    assert reason(base + " www.example.org", "en") == T.URL_EMAIL
    assert reason("write to jesus@example.org " + base, "en") == T.URL_EMAIL
    assert T.SentenceFilter(FilterConfig(drop_urls=False)).reason(base + " www.x.org", "en") is None


def test_wrong_script(verse, normalize, reason):
    english = normalize(verse("k", *PSALM_3_1), "en")[0]
    russian = normalize(verse("r", *PSALM_3_1), "ru")[0]
    chinese = normalize(verse("c", *PSALM_3_1), "zh")[0]
    assert reason(english, "ru") == T.WRONG_SCRIPT  # Latin text in the ru column
    assert reason(russian, "en") == T.WRONG_SCRIPT
    assert reason(normalize(verse("r", *JOHN_11_35), "ru")[0], "zh") == T.WRONG_SCRIPT
    assert reason(chinese, "zh") is None and reason(russian, "ru") is None
    # a few foreign words inside a sentence are fine
    assert reason(russian + " selah", "ru") is None
    # an unlisted language can be given its script
    custom = T.SentenceFilter(FilterConfig(scripts={"xx": ["Cyrillic"]})).reason
    assert custom(english, "xx") == T.WRONG_SCRIPT and custom(russian, "xx") is None


def test_length_ratio_against_the_median_of_the_others(verse, normalize):
    def lengths(texts: dict[str, str]) -> dict[str, float]:
        return {lang: T.comparable_length(T.length_units(t, lang), lang) for lang, t in texts.items()}

    tuple_ = {
        lang: normalize(verse(v, *PSALM_3_2), lang)[0]
        for lang, v in {"en": "k", "fr": "l", "es": "v", "zh": "c"}.items()
    }
    assert T.length_ratio_outliers(lengths(tuple_), 3.0) == []
    tuple_["es"] = normalize(verse("v", *JOHN_11_35), "es")[0]  # a misaligned, much shorter verse
    assert T.length_ratio_outliers(lengths(tuple_), 3.0) == ["es"]
    # a pair that disagrees: both sides are outliers, so the tuple will be dropped
    pair = {"en": tuple_["en"], "es": tuple_["es"]}
    assert sorted(T.length_ratio_outliers(lengths(pair), 3.0)) == ["en", "es"]


def test_clean_tuple_reports_every_drop(verse):
    cleaner = T.Cleaner(NormalizeConfig(), FilterConfig())
    raw = {
        "en": verse("k", *PSALM_3_1),
        "fr": verse("l", *PSALM_3_1),
        "ru": verse("k", *PSALM_3_2),
        "ar": None,
        "zh": verse("c", *ESTHER_8_9),
    }
    kept, dropped, matched = cleaner.clean_tuple(raw)
    assert set(kept) == {"en", "fr"}
    assert dropped == {"ru": T.WRONG_SCRIPT, "ar": T.INVALID_UTF8, "zh": T.TOO_LONG}
    assert matched == {"fr": ["inline_reference"]}


def test_the_filters_are_the_configs_in_order_and_a_new_one_is_a_class_of_its_own(verse, normalize):
    """What the config turns off is not in the list (no check per sentence); the first filter that rejects a
    sentence names the reason, so a filter added to the list counts its drops under its own."""
    names = lambda config: [type(f).__name__ for f in T.filters_for(config)]  # noqa: E731
    assert names(FilterConfig()) == ["NoWords", "TooShort", "TooLong", "UrlOrEmail", "WrongScript"]
    assert names(FilterConfig(drop_urls=False, min_script_fraction=0.0)) == ["NoWords", "TooShort", "TooLong"]

    class NoDigits(T.Filter):
        reason = "digits"

        def rejects(self, text, lang, units, cjk):
            return any(c.isdigit() for c in text)

    text, _ = normalize(verse("l", *PSALM_3_2), "fr")
    keep = T.SentenceFilter(FilterConfig())
    assert keep.reason(text, "fr") is None
    keep.filters.append(NoDigits())
    assert keep.reason(text + " 1", "fr") == "digits"
    assert keep.reason(text + " www.example.org 1", "fr") == T.URL_EMAIL  # the first that rejects it
