"""Per-sentence and per-tuple cleaning: plain functions, testable without Beam (their DoFn: transforms.py).

`Cleaner.clean_tuple` normalizes every sentence of a tuple and applies the
filters; it returns the kept sentences and, for each dropped one, the reason.
Reasons are stable strings: they are metric names and manifest keys.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import regex

from core.normalize import NormalizeConfig, Normalizer
from pipelines.config import FilterConfig

if TYPE_CHECKING:
    from pipelines.langid import LanguageCheck

# Drop reasons, per sentence; a tuple left with fewer than `min_languages` is dropped as TOO_FEW_LANGUAGES.
INVALID_UTF8 = "invalid_utf8"
EMPTY = "empty"
TOO_SHORT = "too_short"
TOO_LONG = "too_long"
LENGTH_RATIO = "length_ratio"
URL_EMAIL = "url_email"
WRONG_SCRIPT = "wrong_script"
WRONG_LANGUAGE = "wrong_language"
TOO_FEW_LANGUAGES = "too_few_languages"

# Languages written without spaces between words: their length is counted in characters.
CJK_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "km", "my", "bo"})
# Characters per English word in these scripts, to compare lengths across a tuple.
CJK_CHARS_PER_WORD = 1.5

# ISO 639-1/3 code -> Unicode scripts whose letters the language is written in.
SCRIPTS: dict[str, tuple[str, ...]] = {
    **{
        lang: ("Latin",)
        for lang in (
            "en fr es pt it de nl ro pl tr id vi tl sw ca cs da et fi ga hr hu is lt lv ms mt "
            "no nb sk sl sq sv eu gl af cy eo la az uz so ha yo ig zu xh"
        ).split()
    },
    **{lang: ("Cyrillic",) for lang in "ru uk bg be sr mk kk ky mn tg".split()},
    **{lang: ("Arabic",) for lang in "ar fa ur ps ug ku".split()},
    "zh": ("Han",),
    "ja": ("Han", "Hiragana", "Katakana"),
    "ko": ("Hangul", "Han"),
    "hi": ("Devanagari",),
    "mr": ("Devanagari",),
    "ne": ("Devanagari",),
    "bn": ("Bengali",),
    "pa": ("Gurmukhi",),
    "gu": ("Gujarati",),
    "ta": ("Tamil",),
    "te": ("Telugu",),
    "kn": ("Kannada",),
    "ml": ("Malayalam",),
    "si": ("Sinhala",),
    "th": ("Thai",),
    "lo": ("Lao",),
    "km": ("Khmer",),
    "my": ("Myanmar",),
    "el": ("Greek",),
    "he": ("Hebrew",),
    "yi": ("Hebrew",),
    "ka": ("Georgian",),
    "hy": ("Armenian",),
    "am": ("Ethiopic",),
    "bo": ("Tibetan",),
}

_URL_EMAIL = re.compile(r"(?i)\b(?:https?://|ftp://|www\.)\S+|\b[\w.+-]+@[\w-]+\.[\w.-]+\b")
_LETTER = regex.compile(r"\p{L}")
_WORD_CHAR = regex.compile(r"[\p{L}\p{N}]")


@functools.cache
def base_language(lang: str) -> str:
    """'zh_Hant' -> 'zh'."""
    return lang.split("_", 1)[0]


def length_units(text: str, lang: str) -> int:
    """Words, or characters (without spaces) for languages written without spaces."""
    if base_language(lang) in CJK_LANGUAGES:
        return len(text) - text.count(" ")
    return len(text.split())


class Filter:
    """One per-sentence filter: `rejects(text, lang, units, cjk)` is True for a sentence it drops, counted under
    its `reason` (`units`: the sentence's length_units; `cjk`: its language is written without spaces). A
    new filter is a new subclass, placed in `filters_for`'s list."""

    reason: str

    def rejects(self, text: str, lang: str, units: int, cjk: bool) -> bool:
        raise NotImplementedError


class NoWords(Filter):
    """Nothing but spaces and punctuation (one Arabic verse is ":")."""

    reason = EMPTY

    def rejects(self, text: str, lang: str, units: int, cjk: bool) -> bool:
        return not _WORD_CHAR.search(text)


@dataclass(frozen=True)
class TooShort(Filter):
    min_words: int
    min_cjk_chars: int
    reason = TOO_SHORT

    def rejects(self, text: str, lang: str, units: int, cjk: bool) -> bool:
        return units < (self.min_cjk_chars if cjk else self.min_words)


@dataclass(frozen=True)
class TooLong(Filter):
    max_words: int
    max_cjk_chars: int
    reason = TOO_LONG

    def rejects(self, text: str, lang: str, units: int, cjk: bool) -> bool:
        return units > (self.max_cjk_chars if cjk else self.max_words)


class UrlOrEmail(Filter):
    reason = URL_EMAIL

    def rejects(self, text: str, lang: str, units: int, cjk: bool) -> bool:
        return ("@" in text or "://" in text or "www." in text) and _URL_EMAIL.search(text) is not None


class WrongScript(Filter):
    """Fewer than `min_fraction` of the letters in the language's scripts (SCRIPTS, with `scripts` over it);
    a language of no known script is let through."""

    reason = WRONG_SCRIPT

    def __init__(self, min_fraction: float, scripts: dict[str, list[str]]) -> None:
        self.min_fraction = min_fraction
        self._patterns: dict[str, tuple[regex.Pattern, regex.Pattern]] = {}
        for lang, names in {**SCRIPTS, **{k: tuple(v) for k, v in scripts.items()}}.items():
            letters = "".join(rf"\p{{Script={s}}}" for s in names)
            # (letters in the script, letters outside it): most text has none outside,
            # which one allocation-free search settles
            self._patterns[lang] = (regex.compile(f"[{letters}]"), regex.compile(rf"[\p{{L}}--[{letters}]]", regex.V1))

    def patterns(self, lang: str) -> tuple[regex.Pattern, regex.Pattern] | None:
        """(letters in the language's script, letters outside it), None for an unknown language."""
        return self._patterns.get(lang) or self._patterns.get(base_language(lang))

    def rejects(self, text: str, lang: str, units: int, cjk: bool) -> bool:
        patterns = self.patterns(lang)
        if patterns is None or not patterns[1].search(text):
            return False
        inside, outside = len(patterns[0].findall(text)), len(patterns[1].findall(text))
        return inside < self.min_fraction * (inside + outside)


class WrongLanguage(Filter):
    """The language identifier's verdict (pipelines.langid); its model loads in about 2 s."""

    reason = WRONG_LANGUAGE

    def __init__(self, check: LanguageCheck) -> None:
        self.check = check

    def rejects(self, text: str, lang: str, units: int, cjk: bool) -> bool:
        return self.check.is_wrong(text, lang)


def filters_for(config: FilterConfig) -> list[Filter]:
    """The filters `config` turns on, in the order they run: the cheap ones first, language id (about 0.2 ms a
    sentence) last. A sentence is counted under the first that rejects it."""
    filters: list[Filter] = [
        NoWords(),
        TooShort(config.min_words, config.min_cjk_chars),
        TooLong(config.max_words, config.max_cjk_chars),
    ]
    if config.drop_urls:
        filters.append(UrlOrEmail())
    if config.min_script_fraction > 0:
        filters.append(WrongScript(config.min_script_fraction, config.scripts))
    if config.language_id.enabled:  # the model loads only when asked for
        from pipelines.langid import LanguageCheck

        filters.append(WrongLanguage(LanguageCheck(config.language_id)))
    return filters


class SentenceFilter:
    """The per-sentence filters of a config; `reason(text, lang)` is None for a kept sentence."""

    def __init__(self, config: FilterConfig) -> None:
        self.config = config
        self.filters = filters_for(config)

    def reason(self, text: str, lang: str, units: int | None = None) -> str | None:
        """The reason of the first filter that rejects `text` (`units`: its length_units, if known), or None."""
        if units is None:
            units = length_units(text, lang)
        cjk = base_language(lang) in CJK_LANGUAGES
        for check in self.filters:
            if check.rejects(text, lang, units, cjk):
                return check.reason
        return None


def comparable_length(units: int, lang: str) -> float:
    """A length in English-word equivalents, to compare sentences across languages."""
    return units / CJK_CHARS_PER_WORD if base_language(lang) in CJK_LANGUAGES else float(units)


def length_ratio_outliers(lengths: dict[str, float], max_ratio: float) -> list[str]:
    """Languages whose length is over `max_ratio` times above/below the median of the others'."""
    if len(lengths) < 2:
        return []
    ordered = sorted(lengths.values())
    out = []
    for lang, n in lengths.items():
        others = ordered.copy()
        others.remove(n)  # the median of the others: the sorted list less one copy of n
        mid = len(others) // 2
        median = others[mid] if len(others) % 2 else (others[mid - 1] + others[mid]) / 2
        n, median = max(n, 1.0), max(median, 1.0)
        if n > max_ratio * median or median > max_ratio * n:
            out.append(lang)
    return out


@dataclass
class Cleaner:
    """Normalize and filter one tuple {lang: text or None (invalid UTF-8)}."""

    normalize: NormalizeConfig
    filters: FilterConfig
    _normalizer: Normalizer = field(init=False)
    _filter: SentenceFilter = field(init=False)

    def __post_init__(self) -> None:
        self._normalizer = Normalizer(self.normalize)
        self._filter = SentenceFilter(self.filters)

    def clean_tuple(
        self, sentences: dict[str, str | None]
    ) -> tuple[dict[str, str], dict[str, str], dict[str, list[str]]]:
        """Return (kept {lang: text}, dropped {lang: reason}, patterns matched {lang: [names]})."""
        kept: dict[str, str] = {}
        dropped: dict[str, str] = {}
        matched: dict[str, list[str]] = {}
        lengths: dict[str, float] = {}
        for lang, raw in sentences.items():
            if raw is None:
                dropped[lang] = INVALID_UTF8
                continue
            text, names = self._normalizer(raw, lang)
            if names:
                matched[lang] = names
            units = length_units(text, lang)
            reason = self._filter.reason(text, lang, units)
            if reason:
                dropped[lang] = reason
            else:
                kept[lang] = text
                lengths[lang] = comparable_length(units, lang)
        if self.filters.max_length_ratio is not None:
            for lang in length_ratio_outliers(lengths, self.filters.max_length_ratio):
                dropped[lang] = LENGTH_RATIO
                del kept[lang]
        return kept, dropped, matched
