"""The composite transforms on their own, with Beam's TestPipeline (mechanics on real verses)."""
from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.config import DedupConfig, SplitConfig
from pipelines.counting import STATS
from pipelines.dedup import DedupTuples
from pipelines.split import SplitTuples, select_held_out, sentence_ids

pytestmark = pytest.mark.slow


@pytest.fixture
def tuples(book_lines):
    lines = book_lines({"en": "k", "fr": "l"}, [57])  # Philemon, 25 verses
    return [(f"b:{i:02d}", {"en": e.lower(), "fr": f.lower()}) for i, (e, f) in enumerate(zip(lines["en"], lines["fr"]))]


def test_dedup_keeps_the_smallest_key_and_counts_the_rest(tuples):
    copies = [("z:1", tuples[3][1]), ("z:2", tuples[3][1]), ("a:0", tuples[7][1])]
    with BeamTestPipeline(runner="FnApiRunner") as p:
        out = p | beam.Create(tuples + copies) | DedupTuples(DedupConfig())
        kept = [t for t in tuples if t[0] != "b:07"] + [("a:0", tuples[7][1])]
        assert_that(out["tuples"], equal_to(kept), label="Kept")
        assert_that(out[STATS] | beam.CombinePerKey(sum),
                    equal_to([("tuples/dropped/duplicate", 3), ("sentences/en/dropped/duplicate", 3),
                              ("sentences/fr/dropped/duplicate", 3)]), label="Counted")


def test_split_sizes_and_no_overlap(tuples):
    repeated = ("c:99", {"en": tuples[0][1]["en"], "fr": "une autre phrase"})
    config = SplitConfig(dev_size=4, test_size=3, seed=3)
    with BeamTestPipeline(runner="FnApiRunner") as p:
        out = p | beam.Create(tuples + [repeated]) | SplitTuples(config, ["en", "fr"])
        sizes = {s: out[s] | f"Count{s}" >> beam.combiners.Count.Globally() for s in ("dev", "test")}
        assert_that(sizes["dev"], equal_to([4]), label="DevSize")
        assert_that(sizes["test"], equal_to([3]), label="TestSize")
        total = (out["train"], out["dev"], out["test"]) | beam.Flatten() | beam.combiners.Count.Globally()
        dropped = out[STATS] | beam.Filter(lambda kv: kv[0] == "tuples/dropped/contaminated") | beam.Map(
            lambda kv: kv[1]) | beam.CombineGlobally(sum)
        both = (total, dropped) | "Both" >> beam.Flatten() | "Sum" >> beam.CombineGlobally(sum)
        assert_that(both, equal_to([len(tuples) + 1]), label="NothingLost")


def test_greedy_selection_skips_repeats_in_hash_order(tuples):
    a, b, c = tuples[0], ("x:1", dict(tuples[0][1])), tuples[1]
    picked = list(select_held_out([(0.1, a), (0.2, b), (0.3, c)], SplitConfig(dev_size=1, test_size=1)))
    assert picked == [("dev", a), ("train", b), ("test", c)]
    assert set(sentence_ids(a[1])) == set(sentence_ids(b[1]))
