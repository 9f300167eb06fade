"""Sentence normalization, the same at preparation, training and serving: NFKC, control and format
characters, whitespace, lowercasing, and noise patterns (`NormalizeConfig`)."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

import regex
from pydantic import Field, field_validator

from core.schema import Schema

_SPACES = re.compile(r"\s+")
# Zero-width (non-)joiners carry meaning in Persian and Indic scripts; every other
# control or format character (soft hyphen, LRM marks, BOM, NUL...) is removed.
_CONTROL = regex.compile(r"(?![\u200c\u200d])[\p{Cc}\p{Cf}]")


class RemovePattern(Schema):
    """A regular expression deleted from sentences (corpus noise); counted per language."""

    name: str = Field(description="Names the pattern in the count of sentences it matched (normalized/<lang>/<name>).")
    regex: str = Field(
        description="A Python regular expression, matched after NFKC normalization; each match is replaced by a space."
    )
    languages: list[str] | None = Field(None, description="The languages it applies to; all when unset.")

    @field_validator("regex")
    @classmethod
    def _compiles(cls, regex: str) -> str:
        try:
            re.compile(regex)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        return regex


def _default_patterns() -> list[RemovePattern]:
    # Patterns see NFKC-normalized text, where full-width brackets are ASCII ones.
    return [
        RemovePattern(name="inline_reference", regex=r"\(\d+:\d+\)"),
        RemovePattern(name="bracketed_note", regex=r"\([^()]*\)", languages=["zh"]),
    ]


class NormalizeConfig(Schema):
    nfkc: bool = Field(
        True, description="Apply Unicode NFKC normalization first (full-width forms to ASCII, ligatures split)."
    )
    lowercase: bool = Field(True, description="Lowercase every sentence (the paper does).")
    remove_patterns: list[RemovePattern] = Field(
        default_factory=_default_patterns,
        description="Noise deleted from sentences; the default removes the Bible's inline verse references "
        '"(51:1)" (fr, ru) and its Chinese notes in full-width brackets "（细拉）" '
        "(shared/DATA.md).",
    )


@dataclass
class Normalizer:
    """NFKC, control/format characters, whitespace, lowercasing, and noise patterns."""

    config: NormalizeConfig
    _patterns: list[tuple[str, re.Pattern[str], frozenset[str] | None]] = field(init=False)

    def __post_init__(self) -> None:
        self._patterns = [
            (p.name, re.compile(p.regex), frozenset(p.languages) if p.languages else None)
            for p in self.config.remove_patterns
        ]

    def __call__(self, text: str, lang: str) -> tuple[str, list[str]]:
        """Return the normalized text and the names of the noise patterns that matched."""
        if self.config.nfkc and not unicodedata.is_normalized("NFKC", text):
            text = unicodedata.normalize("NFKC", text)
        matched = []
        for name, pattern, langs in self._patterns:
            if langs is not None and lang not in langs:
                continue
            text, n = pattern.subn(" ", text)
            if n:
                matched.append(name)
        if text.isprintable():  # no control, format or separator character but the space
            text = " ".join(text.split())
        else:
            text = _SPACES.sub(" ", _CONTROL.sub("", text)).strip()  # remove first: " \u200e " leaves one space
        if self.config.lowercase:
            text = text.lower()
        return text, matched
