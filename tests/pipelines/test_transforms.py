"""The composite transforms and DoFns on their own, with Beam's TestPipeline (mechanics on real verses).

Each test checks what a step forwards and, on its `stats` output, exactly what it
drops under which reason; the inputs inject one known case per reason.
"""

from __future__ import annotations

import json
from collections import Counter

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.config import DedupConfig, OutputConfig, PrepareConfig, SplitConfig
from pipelines.counting import STATS, CountedParDo
from pipelines.dedup import DedupTuples, NearDedup, _lsh_bands
from pipelines.source_config import BibleSource, TableSource
from pipelines.sources import plan_reads
from pipelines.split import SplitTuples, select_held_out, sentence_ids
from pipelines.transforms import CleanTupleFn, ReadTupleFn
from tests.support.corpus import write_lines

pytestmark = pytest.mark.beam

PHILEMON = 57  # one chapter, 25 verses
THIRD_JOHN_14 = (64, 1, 14)  # French and Russian merge verse 15 into it, behind "(1:15)"
ESTHER_8_9 = (17, 8, 9)  # 90 English words
JOHN_11_35 = (43, 11, 35)  # "Jesus wept."


def normalized(text: str) -> str:
    """What the default normalizer makes of a verse free of noise: spaces collapsed, lowercase."""
    return " ".join(text.split()).lower()


def jaccard(a: str, b: str, n: int = 5) -> float:
    """The Jaccard similarity of two texts' sets of n-character shingles."""
    x, y = ({t[i : i + n] for i in range(len(t) - n + 1)} for t in (a, b))
    return len(x & y) / len(x | y)


def summed(stats: beam.PCollection) -> beam.PCollection:
    return stats | "SumStats" >> beam.CombinePerKey(sum)


@pytest.fixture
def tuples(book_lines):
    lines = book_lines({"en": "k", "fr": "l"}, [PHILEMON])
    return [
        (f"b:{i:02d}", {"en": e.lower(), "fr": f.lower()}) for i, (e, f) in enumerate(zip(lines["en"], lines["fr"]))
    ]


def test_read_yields_every_record_and_counts_input_and_malformed(tmp_path, book_lines):
    lines = book_lines({"en": "k", "fr": "l"}, [PHILEMON])
    en, fr = lines["en"], lines["fr"]
    # TSV: header on line 1, verse i on line i + 2 until the two injected rows shift the rest
    rows = [f"{e}\t{f}".encode() for e, f in zip(en, fr)]
    rows.insert(5, en[5].encode())  # line 7: one column, no tab: malformed
    rows[10] = en[9].encode() + b"\t\xff\xfe" + fr[9].encode()  # line 12: French cell not UTF-8
    (tmp_path / "c.tsv").write_bytes(b"en\tfr\n" + b"".join(r + b"\n" for r in rows))
    # JSONL: a record without French, and one that is not an object
    records = [json.dumps({"en": en[0], "fr": fr[0]}), json.dumps({"en": en[1]}), "[1, 2]"]
    write_lines(tmp_path / "c.jsonl", records)
    config = PrepareConfig(
        sources=[
            TableSource(kind="tsv", path=str(tmp_path / "c.tsv"), languages=["en", "fr"], name="c"),
            TableSource(kind="jsonl", path=str(tmp_path / "c.jsonl"), languages=["en", "fr"], name="j"),
            BibleSource(kind="bible", versions={"en": "k", "fr": "l"}, books=[PHILEMON]),
        ],
        output=OutputConfig(read_chunk_lines=10),
    )
    tasks = plan_reads(config).tasks
    assert len(tasks) == 3 + 1 + 1  # 26 TSV lines in chunks of 10, 3 JSONL lines, one book

    tsv = [(f"c:{i + 2}", {"en": e, "fr": f}) for i, (e, f) in enumerate(zip(en[:5], fr[:5]))]
    tsv += [(f"c:{i + 3}", {"en": e, "fr": f}) for i, (e, f) in enumerate(zip(en[5:], fr[5:]), start=5)]
    tsv[9] = ("c:12", {"en": en[9], "fr": None})
    jsonl = [("j:1", {"en": en[0], "fr": fr[0]}), ("j:2", {"en": en[1]})]
    bible = [(f"bible:{PHILEMON}:1:{v}", {"en": e, "fr": f}) for v, (e, f) in enumerate(zip(en, fr), start=1)]
    with BeamTestPipeline(runner="FnApiRunner") as p:
        out = p | beam.Create(tasks) | CountedParDo(ReadTupleFn())
        assert_that(out["tuples"], equal_to(tsv + jsonl + bible), label="Tuples")
        assert_that(
            summed(out[STATS]),
            equal_to(
                [
                    ("tuples/in", 26 + 3 + 25),
                    ("tuples/dropped/malformed", 2),
                    ("sentences/en/in", 25 + 2 + 25),
                    ("sentences/fr/in", 25 + 1 + 25),  # the record without French counts no French sentence
                    ("sources/c/in", 26),
                    ("sources/j/in", 3),
                    ("sources/bible/in", 25),  # by source, malformed too
                ]
            ),
            label="Counted",
        )


def test_clean_normalizes_and_counts_each_drop_reason_once(book_lines, verse):
    lines = book_lines({"en": "k", "fr": "l", "ru": "r"}, [PHILEMON])
    en, fr, ru = lines["en"], lines["fr"], lines["ru"]
    clean = [(f"b:{i:02d}", {"en": e, "fr": f, "ru": r}) for i, (e, f, r) in enumerate(zip(en, fr, ru))]
    reference = {lang: verse(v, *THIRD_JOHN_14) for lang, v in (("en", "k"), ("fr", "l"), ("ru", "r"))}
    assert "(1:15)" in reference["fr"] and "(1:15)" in reference["ru"]
    colon = verse("y", 64, 1, 1)  # the Arabic verse that is just ":"
    esther, wept = verse("k", *ESTHER_8_9), verse("k", *JOHN_11_35)
    assert len(esther.split()) > 50 and len(wept.split()) == 2
    # "Jesus wept." is under a third of the median of French and Russian, and each of those
    # is within three times the median of the other two
    assert min(len(fr[5].split()), len(ru[5].split())) > 3 * 2
    assert all(len(x.split()) < 1.5 * (2 + len(y.split())) for x, y in ((fr[5], ru[5]), (ru[5], fr[5])))
    noisy = [
        ("x:ref", reference),
        ("x:script", {"en": en[0], "fr": ru[0], "ru": ru[0]}),  # Cyrillic given as French
        ("x:empty", {"en": colon, "fr": fr[1], "ru": ru[1]}),
        ("x:long", {"en": esther, "fr": fr[2], "ru": ru[2]}),
        ("x:ratio", {"en": wept, "fr": fr[5], "ru": ru[5]}),
        ("x:url", {"en": en[3] + " https://example.org/philemon", "fr": fr[3], "ru": ru[3]}),
        ("x:few", {"en": None, "fr": colon, "ru": ru[4]}),  # only Russian left: fewer than 2 languages
    ]
    kept = [(k, {lang: normalized(t) for lang, t in s.items()}) for k, s in clean] + [
        ("x:ref", {lang: normalized(t.replace("(1:15)", " ")) for lang, t in reference.items()}),
        ("x:script", {"en": normalized(en[0]), "ru": normalized(ru[0])}),
        ("x:empty", {"fr": normalized(fr[1]), "ru": normalized(ru[1])}),
        ("x:long", {"fr": normalized(fr[2]), "ru": normalized(ru[2])}),
        ("x:ratio", {"fr": normalized(fr[5]), "ru": normalized(ru[5])}),
        ("x:url", {"fr": normalized(fr[3]), "ru": normalized(ru[3])}),
    ]
    with BeamTestPipeline(runner="FnApiRunner") as p:
        out = p | beam.Create(clean + noisy) | CountedParDo(CleanTupleFn(PrepareConfig()))
        assert_that(out["tuples"], equal_to(kept), label="Kept")
        assert_that(
            summed(out[STATS]),
            equal_to(
                [
                    ("normalized/fr/inline_reference", 1),
                    ("normalized/ru/inline_reference", 1),
                    ("sentences/fr/dropped/wrong_script", 1),
                    ("sentences/en/dropped/empty", 1),
                    ("sentences/en/dropped/too_long", 1),
                    ("sentences/en/dropped/length_ratio", 1),
                    ("sentences/en/dropped/url_email", 1),
                    ("sentences/en/dropped/invalid_utf8", 1),
                    ("sentences/fr/dropped/empty", 1),
                    ("tuples/dropped/too_few_languages", 1),
                    ("sentences/ru/dropped/too_few_languages", 1),
                ]
            ),
            label="Counted",
        )


def test_dedup_keeps_the_smallest_key_and_counts_the_rest(tuples):
    copies = [("z:1", tuples[3][1]), ("z:2", tuples[3][1]), ("a:0", tuples[7][1])]
    with BeamTestPipeline(runner="FnApiRunner") as p:
        out = p | beam.Create(tuples + copies) | DedupTuples(DedupConfig())
        kept = [t for t in tuples if t[0] != "b:07"] + [("a:0", tuples[7][1])]
        assert_that(out["tuples"], equal_to(kept), label="Kept")
        assert_that(
            out[STATS] | beam.CombinePerKey(sum),
            equal_to(
                [
                    ("tuples/dropped/duplicate", 3),
                    ("sentences/en/dropped/duplicate", 3),
                    ("sentences/fr/dropped/duplicate", 3),
                ]
            ),
            label="Counted",
        )


@pytest.fixture
def kjv(book_lines):
    """(Philemon as (key, {en, fr}) tuples, modern(i): verse i with the English of the modern-spelling KJV)."""
    lines = book_lines({"en": "k", "fr": "l", "modern": "2"}, [PHILEMON])
    en, fr, modern = ([normalized(t) for t in lines[v]] for v in ("en", "fr", "modern"))
    base = [(f"b:{i:02d}", {"en": e, "fr": f}) for i, (e, f) in enumerate(zip(en, fr))]
    return base, lambda i: {"en": modern[i], "fr": fr[i]}


def similarity(a: dict[str, str], b: dict[str, str]) -> float:
    return jaccard(a["en"] + a["fr"], b["en"] + b["fr"])


def share_an_lsh_band(a: dict[str, str], b: dict[str, str], config: DedupConfig) -> bool:
    """Whether two tuples meet in some LSH band: only then are they compared at all."""
    x, y = ({band for band, _ in _lsh_bands(("k", t), config)} for t in (a, b))
    return bool(x & y)


def test_near_dedup_drops_the_larger_key_of_a_near_duplicate_and_counts_it(kjv):
    base, modern = kjv
    config = DedupConfig(near_duplicates=True)  # threshold 0.8
    # Version "2" is the KJV in modern spelling: verses 13 and 17 differ by a word or two,
    # verse 19 by many ("refresh my heart" for "refresh my bowels", "you" for "thee")
    assert min(similarity(base[i][1], modern(i)) for i in (12, 16)) > 0.9
    assert similarity(base[18][1], modern(18)) < 0.7
    assert share_an_lsh_band(base[18][1], modern(18), config)  # compared, so the threshold decides
    later = ("z:12", modern(12))  # dropped: b:12 comes first
    earlier = ("a:16", modern(16))  # kept: b:16 is dropped instead
    distinct = ("c:18", modern(18))
    with BeamTestPipeline(runner="FnApiRunner") as p:
        out = p | beam.Create(base + [later, earlier, distinct]) | NearDedup(config)
        assert_that(out["kept"], equal_to([t for t in base if t[0] != "b:16"] + [earlier, distinct]), label="Kept")
        assert_that(
            summed(out[STATS]),
            equal_to(
                [
                    ("tuples/dropped/near_duplicate", 2),
                    ("sentences/en/dropped/near_duplicate", 2),
                    ("sentences/fr/dropped/near_duplicate", 2),
                ]
            ),
            label="Counted",
        )


def test_near_dedup_drops_a_near_duplicate_under_the_square_root_of_the_threshold(kjv):
    base, modern = kjv
    config = DedupConfig(near_duplicates=True)
    assert 0.85 < similarity(base[1][1], modern(1)) < 0.8**0.5  # "fellow soldier", "your house"
    assert share_an_lsh_band(base[1][1], modern(1), config)
    with BeamTestPipeline(runner="FnApiRunner") as p:
        out = p | beam.Create(base + [("z:01", modern(1))]) | NearDedup(config)
        assert_that(out["kept"], equal_to(base), label="Kept")


def test_split_sizes_and_no_overlap(tuples):
    repeated = ("c:99", {"en": tuples[0][1]["en"], "fr": "une autre phrase"})
    config = SplitConfig(dev_size=4, test_size=3, seed=3)
    with BeamTestPipeline(runner="FnApiRunner") as p:
        out = p | beam.Create(tuples + [repeated]) | SplitTuples(config, ["en", "fr"])
        sizes = {s: out[s] | f"Count{s}" >> beam.combiners.Count.Globally() for s in ("dev", "test")}
        assert_that(sizes["dev"], equal_to([4]), label="DevSize")
        assert_that(sizes["test"], equal_to([3]), label="TestSize")
        total = (out["train"], out["dev"], out["test"]) | beam.Flatten() | beam.combiners.Count.Globally()
        dropped = (
            out[STATS]
            | beam.Filter(lambda kv: kv[0] == "tuples/dropped/contaminated")
            | beam.Map(lambda kv: kv[1])
            | beam.CombineGlobally(sum)
        )
        both = (total, dropped) | "Both" >> beam.Flatten() | "Sum" >> beam.CombineGlobally(sum)
        assert_that(both, equal_to([len(tuples) + 1]), label="NothingLost")


def test_each_source_gets_an_equal_share_of_dev_and_test_and_a_small_one_leaves_the_rest(tuples):
    """Sources of very different sizes (a book's verses, many catalog messages, a small memory): by size, they
    take turns; by fraction, each gives its fraction."""
    import random

    rng = random.Random(0)
    sized = {"book": 100, "catalogs": 100, "tmx": 3}
    candidates = [
        (rng.random(), (f"{source}:{i:03d}", {"en": f"{source} {i}", "fr": f"{source} {i} fr"}))
        for source, n in sized.items()
        for i in range(n)
    ]
    picked = list(select_held_out(candidates, SplitConfig(dev_size=10, test_size=10)))
    assert sorted(t[0] for _, t in picked) == sorted(t[0] for _, t in candidates)  # each candidate once
    shares = {split: Counter(t[0].split(":")[0] for s, t in picked if s == split) for split in ("dev", "test")}
    assert shares["dev"] == {"book": 4, "catalogs": 3, "tmx": 3}  # turns in name order: b, c, t, b, ...
    assert shares["test"] == {"book": 5, "catalogs": 5}  # tmx has no more: its share goes to the others
    one = [(u, t) for u, t in candidates if t[0].startswith("book:")]  # one source: the smallest hashes
    chosen = [t[0] for s, t in select_held_out(one, SplitConfig(dev_size=3, test_size=2)) if s != "train"]
    assert chosen == [t[0] for _, t in sorted(one)[:5]]
    by_fraction = Counter(
        t[0].split(":")[0]
        for s, t in select_held_out(candidates, SplitConfig(dev_fraction=0.1, test_fraction=0.1))
        if s == "dev"
    )
    assert by_fraction == Counter(t[0].split(":")[0] for u, t in candidates if u < 0.1)


def test_greedy_selection_skips_repeats_in_hash_order(tuples):
    a, b, c = tuples[0], ("x:1", dict(tuples[0][1])), tuples[1]
    picked = list(select_held_out([(0.1, a), (0.2, b), (0.3, c)], SplitConfig(dev_size=1, test_size=1)))
    assert picked == [("dev", a), ("train", b), ("test", c)]
    assert set(sentence_ids(a[1])) == set(sentence_ids(b[1]))
