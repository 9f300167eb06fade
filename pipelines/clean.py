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
    **{lang: ("Latin",) for lang in (
        "en fr es pt it de nl ro pl tr id vi tl sw ca cs da et fi ga hr hu is lt lv ms mt "
        "no nb sk sl sq sv eu gl af cy eo la az uz so ha yo ig zu xh"
    ).split()},
    **{lang: ("Cyrillic",) for lang in "ru uk bg be sr mk kk ky mn tg".split()},
    **{lang: ("Arabic",) for lang in "ar fa ur ps ug ku".split()},
    "zh": ("Han",), "ja": ("Han", "Hiragana", "Katakana"), "ko": ("Hangul", "Han"),
    "hi": ("Devanagari",), "mr": ("Devanagari",), "ne": ("Devanagari",), "bn": ("Bengali",),
    "pa": ("Gurmukhi",), "gu": ("Gujarati",), "ta": ("Tamil",), "te": ("Telugu",),
    "kn": ("Kannada",), "ml": ("Malayalam",), "si": ("Sinhala",), "th": ("Thai",),
    "lo": ("Lao",), "km": ("Khmer",), "my": ("Myanmar",), "el": ("Greek",), "he": ("Hebrew",),
    "yi": ("Hebrew",), "ka": ("Georgian",), "hy": ("Armenian",), "am": ("Ethiopic",),
    "bo": ("Tibetan",),
}

_URL_EMAIL = re.compile(
    r"(?i)\b(?:https?://|ftp://|www\.)\S+|\b[\w.+-]+@[\w-]+\.[\w.-]+\b"
)
_LETTER = regex.compile(r"\p{L}")
_WORD_CHAR = regex.compile(r"[\p{L}\p{N}]")


@functools.lru_cache(maxsize=None)
def base_language(lang: str) -> str:
    """'zh_Hant' -> 'zh'."""
    return lang.split("_", 1)[0]


def length_units(text: str, lang: str) -> int:
    """Words, or characters (without spaces) for languages written without spaces."""
    if base_language(lang) in CJK_LANGUAGES:
        return len(text) - text.count(" ")
    return len(text.split())


@dataclass
class SentenceFilter:
    """The per-sentence filters; `reason(text, lang)` is None for a kept sentence."""

    config: FilterConfig
    _scripts: dict[str, tuple[regex.Pattern, regex.Pattern]] = field(init=False)
    _language: LanguageCheck | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.config.language_id.enabled:  # the model loads in about 2 s: only when asked for
            from pipelines.langid import LanguageCheck

            self._language = LanguageCheck(self.config.language_id)
        table = {**SCRIPTS, **{k: tuple(v) for k, v in self.config.scripts.items()}}
        self._scripts = {}
        for lang, scripts in table.items():
            names = "".join(rf"\p{{Script={s}}}" for s in scripts)
            # (letters in the script, letters outside it): most text has none outside,
            # which one allocation-free search settles
            self._scripts[lang] = (regex.compile(f"[{names}]"), regex.compile(rf"[\p{{L}}--[{names}]]", regex.V1))

    def script_patterns(self, lang: str) -> tuple[regex.Pattern, regex.Pattern] | None:
        """(letters in the language's script, letters outside it), None for an unknown language."""
        return self._scripts.get(lang) or self._scripts.get(base_language(lang))

    def reason(self, text: str, lang: str, units: int | None = None) -> str | None:
        """The first filter that rejects `text` (`units`: its length_units, if known), or None."""
        cfg = self.config
        if not _WORD_CHAR.search(text):
            return EMPTY  # nothing but spaces and punctuation (one Arabic verse is ":")
        if units is None:
            units = length_units(text, lang)
        cjk = base_language(lang) in CJK_LANGUAGES
        if units < (cfg.min_cjk_chars if cjk else cfg.min_words):
            return TOO_SHORT
        if units > (cfg.max_cjk_chars if cjk else cfg.max_words):
            return TOO_LONG
        if cfg.drop_urls and ("@" in text or "://" in text or "www." in text) and _URL_EMAIL.search(text):
            return URL_EMAIL
        if cfg.min_script_fraction > 0:
            patterns = self.script_patterns(lang)
            if patterns is not None and patterns[1].search(text):
                inside, outside = len(patterns[0].findall(text)), len(patterns[1].findall(text))
                if inside < cfg.min_script_fraction * (inside + outside):
                    return WRONG_SCRIPT
        if self._language is not None and self._language.is_wrong(text, lang):
            return WRONG_LANGUAGE  # last: the slowest check (about 0.2 ms)
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
