"""`prepare.split.decontaminate_against`: dev and test tuples that another prepared dataset trains on are dropped
and counted (pipelines/decontaminate.py), on real verses: the plain functions without Beam, the transform in
Beam's TestPipeline, and the whole job against the shared small dataset's training split."""

from __future__ import annotations

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from core import dataset, storage
from core.normalize import NormalizeConfig, Normalizer
from orchestration.config import load_config
from pipelines.config import PrepareConfig, SplitConfig
from pipelines.counting import STATS
from pipelines.decontaminate import INPUT_SOURCE, DropTrainedOn, open_trained_on, trained_on, training_index
from pipelines.errors import HeldOutError, SourceError
from pipelines.prepare import fingerprint, run_prepare
from pipelines.runners import pipeline_options
from pipelines.split import check_held_out, sentence_ids
from tests.support.corpus import write_lines

RUTH = 8  # one of the small dataset's books (tests.support.corpus.SMALL_BOOKS)
HAGGAI = 37  # not one of them
NORMALIZE = Normalizer(NormalizeConfig())


def normalized(sentences: dict[str, str]) -> dict[str, str]:
    """As the cleaning step leaves them (the text the dedup and the split compare)."""
    return {lang: NORMALIZE(text, lang)[0] for lang, text in sentences.items()}


# --- the plain functions, no Beam --------------------------------------------------------------------------


def test_a_tuple_is_trained_on_when_a_sentence_of_it_is_in_the_same_language(verse):
    ruth_1_16 = {"en": verse("k", 8, 1, 16), "fr": verse("l", 8, 1, 16), "zh": verse("c", 8, 1, 16)}
    trained = normalized(ruth_1_16)
    table = pa.table(
        {
            "en_text": [trained["en"], None],
            "fr_text": [trained["fr"], normalized({"fr": verse("l", 8, 1, 17)})["fr"]],
            "zh_text": [trained["zh"], None],
        }
    )
    seen = training_index(table, ["en", "fr", "zh"])
    assert len(seen) == 4  # the nulls are no sentence

    # the same French verse as another corpus spells it (case, spacing): the same once normalized
    respelled = ruth_1_16["fr"].upper().replace(" ", "  ")
    held_out = normalized({"en": verse("k", 37, 1, 1), "fr": respelled})
    assert trained_on(held_out, seen) == ["fr"]
    assert trained_on(normalized(ruth_1_16), seen) == ["en", "fr", "zh"]
    # only the same language counts: that French sentence in a column of another language is no overlap
    assert trained_on({"es": trained["fr"]}, seen) == []
    unseen = normalized({"en": verse("k", 37, 1, 2), "fr": verse("l", 37, 1, 2), "zh": verse("c", 37, 1, 2)})
    assert trained_on(unseen, seen) == []
    # a language left out of the index is not compared
    assert training_index(table, ["en"]) == frozenset(sentence_ids({"en": trained["en"]}))


def test_the_drops_count_as_held_out_for_the_sizes():
    config = SplitConfig(dev_size=10, test_size=10)
    check_held_out(config, {"train": 99, "dev": 7, "test": 10}, {"dev": 3, "test": 0})
    with pytest.raises(HeldOutError, match="only 19 tuples"):
        check_held_out(config, {"train": 99, "dev": 7, "test": 10}, {"dev": 2})


def test_the_option_is_in_the_fingerprint_and_unset_leaves_earlier_fingerprints_alone():
    inputs = [{"path": "bible.db", "sha256": "0" * 64}]
    plain = PrepareConfig()
    dumped = plain.model_dump(mode="json")
    del dumped["split"]["decontaminate_against"]
    # the formula before the option existed: every dataset prepared without it keeps its fingerprint
    assert fingerprint(plain, inputs) == dataset.fingerprint(
        {"format": dataset.FORMAT, "config": dumped, "inputs": inputs}
    )
    against = PrepareConfig(split=SplitConfig(decontaminate_against=[{"dataset": "runs/other/data"}]))
    pinned = PrepareConfig(
        split=SplitConfig(decontaminate_against=[{"dataset": "runs/other/data", "fingerprint": "ab" * 32}])
    )
    assert len({fingerprint(c, inputs) for c in (plain, against, pinned)}) == 3


def test_the_config_rejects_an_unknown_key_and_a_missing_dataset_is_named(tmp_path):
    with pytest.raises(Exception, match=r"decontaminate_against\.0\.split: unknown key"):
        load_config(None, ["prepare.split.decontaminate_against=[{dataset: runs/x/data, split: train}]"])
    config = load_config(
        None, [f"run_dir={tmp_path / 'run'}", f"prepare.split.decontaminate_against=[{{dataset: {tmp_path / 'none'}}}]"]
    )
    with pytest.raises(dataset.DatasetError, match=r"decontaminate_against\[0\]: .*not a finished dataset"):
        open_trained_on(config.prepare, config.data_dir)


# --- Beam -------------------------------------------------------------------------------------------------


def rows(data_dir: str, split: str) -> list[dict]:
    return dataset.read_split(data_dir, split).to_pylist()


def as_tuple(row: dict, languages: list[str]) -> tuple[str, dict[str, str]]:
    return row["key"], {lang: row[f"{lang}_text"] for lang in languages if row[f"{lang}_text"] is not None}


@pytest.mark.beam
def test_drop_trained_on_keeps_what_the_training_split_does_not_hold(small_dataset):
    """The small dataset's own splits: its training tuples are trained on, its test tuples are not (its train
    is decontaminated against them)."""
    langs = ["en", "fr", "zh"]
    (other,) = open_trained_on(
        load_config(None, [f"prepare.split.decontaminate_against=[{{dataset: {small_dataset.data_dir}}}]"]).prepare,
        "elsewhere",
    )
    train = [as_tuple(r, langs) for r in rows(small_dataset.data_dir, "train")[:6]]
    test = [as_tuple(r, langs) for r in rows(small_dataset.data_dir, "test")[:5]]
    with BeamTestPipeline(runner="FnApiRunner") as p:
        splits = {
            "dev": p | "Dev" >> beam.Create(train[:4] + test[:1]),
            "test": p | "Test" >> beam.Create(train[4:] + test[1:]),
        }
        out = splits | DropTrainedOn([other], langs)
        assert_that(out["dev"], equal_to(test[:1]), label="Dev")
        assert_that(out["test"], equal_to(test[1:]), label="Test")
        counts = out[STATS] | beam.CombinePerKey(sum)
        dropped = {"dev": train[:4], "test": train[4:]}
        assert_that(
            counts,
            equal_to(
                [(f"tuples/dropped/contaminated_{s}", len(ts)) for s, ts in dropped.items()]
                + [
                    (f"sentences/{lang}/dropped/contaminated_{s}", n)
                    for s, ts in dropped.items()
                    for lang in langs
                    for n in [sum(lang in t[1] for t in ts)]
                    if n
                ]
            ),
            label="Counts",
        )


@pytest.fixture
def ruth_and_haggai(tmp_path, book_lines) -> list[str]:
    """A corpus of Ruth (a book of the small dataset) and Haggai (not one) in en, fr, zh: the overrides of its
    prepare."""
    versions = {"en": "k", "fr": "l", "zh": "c"}
    for lang, lines in book_lines(versions, [RUTH, HAGGAI]).items():
        write_lines(tmp_path / f"c.{lang}", lines)
    return [
        f"run_dir={tmp_path / 'run'}",
        f"prepare.sources=[{{kind: text, path: '{tmp_path}/c.{{lang}}', languages: [en, fr, zh]}}]",
        "prepare.split.dev_size=12",
        "prepare.split.test_size=12",
        "prepare.spm.vocab_size=1000",
    ]


def prepare(config, **kwargs):
    return run_prepare(
        config.prepare, config.data_dir, options=pipeline_options([]), resolved_config=config.to_dict(), **kwargs
    )


@pytest.mark.beam
def test_prepare_drops_and_counts_dev_and_test_tuples_another_dataset_trains_on(
    small_dataset, ruth_and_haggai, tmp_path
):
    langs = ["en", "fr", "zh"]
    plain = load_config(None, ruth_and_haggai)
    before = prepare(plain).manifest
    against = f"prepare.split.decontaminate_against=[{{dataset: {small_dataset.data_dir}}}]"
    config = load_config(None, [*ruth_and_haggai, f"run_dir={tmp_path / 'against'}", against])
    after = prepare(config).manifest

    seen = {(lang, r[f"{lang}_text"]) for r in rows(small_dataset.data_dir, "train") for lang in langs}
    shares = lambda r: any((lang, r[f"{lang}_text"]) in seen for lang in langs)  # noqa: E731
    counts = after.counts.tuples
    for split in ("dev", "test"):
        held = rows(plain.data_dir, split)  # what the split held out, the same with or without the option
        kept = rows(config.data_dir, split)
        assert [r["key"] for r in kept] == [r["key"] for r in held if not shares(r)]
        dropped = sum(shares(r) for r in held)
        assert dropped and kept, split  # Ruth's verses trained on, Haggai's not: some of each
        assert counts.dropped[f"contaminated_{split}"] == dropped and counts.out[split] == len(kept)
        for lang in langs:
            assert after.counts.sentences[lang].dropped[f"contaminated_{split}"] == dropped
    assert {r["key"] for r in rows(config.data_dir, "train")} == {r["key"] for r in rows(plain.data_dir, "train")}
    assert counts.read == sum(counts.out.values()) + sum(counts.dropped.values())  # every tuple accounted for
    assert "contaminated_dev" not in before.counts.tuples.dropped

    # what it was decontaminated against is in its inputs and fingerprint; unchanged, a rerun does nothing
    trained = dataset.Dataset.open(small_dataset.data_dir)
    recorded = {r.path: r.sha256 for r in after.inputs if r.source == INPUT_SOURCE}
    assert recorded == {
        storage.join(trained.location, path): sha for path, sha in trained.sha256(["train"], spm=False).items()
    }
    assert after.fingerprint != before.fingerprint
    assert prepare(config).skipped


@pytest.mark.beam
def test_a_dataset_that_cannot_be_compared_is_refused_before_any_work(small_dataset, ruth_and_haggai, tmp_path):
    where = small_dataset.data_dir
    refused = {
        "prepare.normalize.lowercase=false": "normalized with prepare.normalize",
        f"prepare.split.decontaminate_against=[{{dataset: {where}, fingerprint: {'ab' * 32}}}]": "not the pinned",
        f"dataset_dir={where}": "is the dataset being prepared",
    }
    for override, message in refused.items():
        extra = (
            []
            if "decontaminate_against" in override
            else [f"prepare.split.decontaminate_against=[{{dataset: {where}}}]"]
        )
        config = load_config(None, [*ruth_and_haggai, *extra, override])
        with pytest.raises(SourceError, match=message):
            prepare(config)
        assert not (tmp_path / "run").exists()  # nothing was staged


def test_catalogs_unseen_is_catalogs_heldout_decontaminated_against_the_recipe():
    """The same sources and split as catalogs-heldout (so the same tuples are held out), less what the
    multidomain recipe's training split holds."""
    from pathlib import Path

    configs = Path(__file__).resolve().parents[2] / "configs"
    unseen, heldout = (load_config(configs / f"catalogs-{name}.yaml") for name in ("unseen", "heldout"))
    assert [a.dataset for a in unseen.prepare.split.decontaminate_against] == ["runs/multidomain-cpu/data"]
    assert unseen.prepare.model_copy(update={"split": heldout.prepare.split}) == heldout.prepare
    assert unseen.prepare.split.model_copy(update={"decontaminate_against": []}) == heldout.prepare.split
