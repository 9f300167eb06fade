"""Typed configuration of the corpus-preparation stage (`prepare:` in a run's YAML).

Every default of the stage lives here and only here. The models reject
unknown keys and values of the wrong type; `orchestration.config` turns their
errors into messages that name the YAML key.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from core.location import Location
from core.normalize import NormalizeConfig
from core.schema import Schema
from pipelines.source_config import LANG_CODE, BibleSource, Source, source_name

SOURCE_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class LanguageIdConfig(Schema):
    """The `wrong_language` filter: py3langid's model (inside the package) gives each sentence a
    probability of being in its column's language; a sentence below the threshold is dropped."""

    enabled: bool = Field(
        default=False,
        description="Off by default: it costs about 0.2 ms of CPU per sentence, 2.7x the CPU of the "
        "Bible job (benchmarks/RESULTS.md, language identification).",
    )
    min_probability: float = Field(
        default=0.05,
        ge=0.0,
        le=1.0,
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
    min_words: int = Field(default=1, ge=0, description="Drop a sentence of fewer words (spaces apart).")
    max_words: int = Field(default=50, ge=1, description="The paper drops sentences over 50 words.")
    max_cjk_chars: int = Field(
        default=80,
        ge=1,
        description="max_words of the languages written without spaces (zh, ja, th...), in "
        "characters: about 1.5 Chinese characters stand for an English word in the Bible.",
    )
    min_cjk_chars: int = Field(
        default=1, ge=0, description="min_words of the languages written without spaces, in characters."
    )
    max_length_ratio: float | None = Field(
        default=3.0,
        ge=1.0,
        description="Drop a sentence this many times longer or shorter than the median of the "
        "tuple's other languages (words, CJK characters / 1.5); null disables.",
    )
    drop_urls: bool = Field(default=True, description="Drop a sentence holding a URL or an e-mail address.")
    min_script_fraction: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="Share of letters that must be in the language's script; 0 disables.",
    )
    scripts: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Language -> Unicode script names, adding to or overriding the built-in table.",
    )
    min_languages: int = Field(default=2, ge=1, description="A tuple left with fewer languages is dropped.")
    language_id: LanguageIdConfig = Field(default_factory=LanguageIdConfig)


class DedupConfig(Schema):
    near_duplicates: bool = Field(
        default=False, description="Also drop near-duplicate tuples (MinHash LSH); exact duplicates always go."
    )
    num_perm: int = Field(default=128, ge=8, description="MinHash permutations of a tuple's signature.")
    bands: int = Field(
        default=16,
        ge=1,
        description="LSH bands the signature is cut into (must divide num_perm); tuples sharing a band are compared.",
    )
    threshold: float = Field(
        default=0.8,
        gt=0.0,
        le=1.0,
        description="Drop a tuple whose estimated Jaccard similarity to the first "
        "(by key) of a band it shares is at least this.",
    )
    shingle_chars: int = Field(
        default=5, ge=1, description="Length of the character shingles of a tuple's joined text that MinHash hashes."
    )

    @model_validator(mode="after")
    def _bands_divide(self) -> DedupConfig:
        if self.num_perm % self.bands:
            raise ValueError(f"bands ({self.bands}) must divide num_perm ({self.num_perm})")
        return self


class TrainedOnDataset(Schema):
    """A prepared dataset whose training split dev and test must share no sentence with
    (`pipelines.decontaminate`)."""

    dataset: str = Field(description="Its location: a dataset directory or a URI (s3://, gs://, hdfs://, file://).")
    fingerprint: str | None = Field(
        default=None, description="Its manifest fingerprint, pinned: refused if it holds another; unset: any."
    )

    @field_validator("dataset")
    @classmethod
    def _location(cls, dataset: str) -> str:
        Location.of(dataset, "dataset")  # StorageError, a ValueError, for a location no filesystem opens
        return dataset  # as given: `open_trained_on` makes it absolute


class SplitConfig(Schema):
    """Held-out splits, chosen by a seeded hash of the tuple key: by size or by fraction."""

    seed: int = Field(default=0, description="Seed of the hash of tuple keys that picks the held-out tuples.")
    dev_size: int | None = Field(
        default=4000, ge=0, description="Dev tuples, taken from the sources in turn; unused with the fractions."
    )
    test_size: int | None = Field(
        default=4000, ge=0, description="Test tuples, taken from the sources in turn; unused with the fractions."
    )
    dev_fraction: float | None = Field(
        default=None,
        ge=0.0,
        lt=1.0,
        description="Share of each source's tuples held out as dev, instead of dev_size (set with test_fraction).",
    )
    test_fraction: float | None = Field(
        default=None,
        ge=0.0,
        lt=1.0,
        description="Share of each source's tuples held out as test, instead of test_size (set with dev_fraction).",
    )
    heldout_complete: bool = Field(
        default=True,
        description="Hold out only tuples with every language, so that every pair of the "
        "evaluation matrix is measured on the same sentences.",
    )
    decontaminate_against: list[TrainedOnDataset] = Field(
        default_factory=list,
        description="Drop every dev and test tuple sharing a normalized sentence with these datasets' training "
        "splits (counted as contaminated_dev, contaminated_test); by size, the splits come out that much short.",
    )

    @model_validator(mode="after")
    def _one_mode(self) -> SplitConfig:
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
        return 0 if self.by_fraction else sum(self.sizes())

    def sizes(self) -> tuple[int, int]:
        """(dev, test) tuples of a split by size (`_one_mode` has checked both are set)."""
        assert self.dev_size is not None and self.test_size is not None, self
        return self.dev_size, self.test_size

    def fractions(self) -> tuple[float, float]:
        """(dev, test) fractions of a split by fraction (`_one_mode` has checked both are set)."""
        assert self.dev_fraction is not None and self.test_fraction is not None, self
        return self.dev_fraction, self.test_fraction


class SpmConfig(Schema):
    """The joint BPE model (sentencepiece), trained on a language-balanced sample of train."""

    vocab_size: int = Field(
        default=20000,
        ge=100,
        description="BPE pieces of the joint vocabulary (the paper: 20k); fewer when the sample is small.",
    )
    sample_sentences: int = Field(
        default=1_000_000, ge=100, description="Training sentences drawn (at most) to learn the BPE model from."
    )
    temperature: float = Field(
        default=5.0, ge=1.0, description="p(lang) ~ n_lang^(1/T): 1 keeps the data's proportions."
    )
    character_coverage: float = Field(
        default=0.9995,
        gt=0.0,
        le=1.0,
        description="Share of the sample's characters the vocabulary covers; the rarest others become unknown.",
    )
    num_threads: int = Field(default=2, ge=1, description="sentencepiece's threads while it learns the BPE model.")


class OutputConfig(Schema):
    train_shards: int = Field(
        default=4, ge=1, description="Parquet files the train split is written in, tuples spread by key hash."
    )
    heldout_shards: int = Field(default=1, ge=1, description="Parquet files each of dev and test is written in.")
    read_chunk_lines: int = Field(default=20000, ge=1, description="Lines per read task: the unit of read parallelism.")


class PrepareConfig(Schema):
    sources: list[Source] = Field(
        default_factory=lambda: list[Source]([BibleSource(kind="bible")]),
        description="The corpora read, each told apart by its kind; the Bible in the paper's six languages by default.",
    )
    normalize: NormalizeConfig = Field(default_factory=NormalizeConfig)
    filters: FilterConfig = Field(default_factory=FilterConfig)
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    split: SplitConfig = Field(default_factory=SplitConfig)
    spm: SpmConfig = Field(default_factory=SpmConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)

    @model_validator(mode="after")
    def _sources(self) -> PrepareConfig:
        if not self.sources:
            raise ValueError("sources: give at least one corpus")
        names = [source_name(s, i) for i, s in enumerate(self.sources)]
        bad = [n for n in names if not SOURCE_NAME.fullmatch(n)]
        if bad:
            raise ValueError(
                f"sources: names {bad} may hold only letters, digits, '_', '.' and '-' (a name begins "
                "each of its tuples' keys, before a ':')"
            )
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
