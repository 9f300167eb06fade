"""The building blocks that keep the job portable: counts on a DoFn's one output, broadcasts by join."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.counting import STATS, CountedParDo, Tally
from pipelines.joins import JoinSingleton, shuffles_broadcasts

pytestmark = pytest.mark.beam


class _KeepEvenFn(beam.DoFn):
    def process(self, n: int):
        tally = Tally()
        if n % 2:
            tally.add("dropped/odd")
        else:
            yield n
        tally.add("in")
        yield from tally.flush()


def test_counted_par_do_splits_elements_from_counts():
    with BeamTestPipeline(runner="FnApiRunner") as p:
        out = p | beam.Create(range(10)) | CountedParDo(_KeepEvenFn(), main="even")
        assert_that(out["even"], equal_to([0, 2, 4, 6, 8]), label="Elements")
        assert_that(out[STATS] | beam.CombinePerKey(sum), equal_to([("in", 10), ("dropped/odd", 5)]), label="Counts")


@pytest.mark.parametrize("by_shuffle", [True, False], ids=["shuffle", "side_input"])
def test_join_singleton_gives_every_element_once_with_the_value(by_shuffle):
    words = [f"w{i}" for i in range(50)]
    with BeamTestPipeline(runner="FnApiRunner") as p:
        inputs = {"elements": p | "Words" >> beam.Create(words), "value": p | "Value" >> beam.Create([{"x": 1}])}
        joined = inputs | JoinSingleton(key=lambda w: w, buckets=4, by_shuffle=by_shuffle)
        assert_that(
            joined | beam.FlatMap(lambda g: [(g[0]["x"], w) for w in g[1]]),
            equal_to([(1, w) for w in words]),
            label="Pairs",
        )
        groups = 4 if by_shuffle else len(words)
        assert_that(joined | "Groups" >> beam.combiners.Count.Globally(), equal_to([groups]), label="Groups")


@pytest.mark.parametrize("by_shuffle", [True, False], ids=["shuffle", "side_input"])
def test_join_singleton_without_a_value_uses_the_default_or_fails(by_shuffle):
    with BeamTestPipeline(runner="FnApiRunner") as p:
        joined = {"elements": p | "Words" >> beam.Create(["a", "b"]), "value": p | "None" >> beam.Create([])} | (
            JoinSingleton(key=lambda w: w, default="none", by_shuffle=by_shuffle)
        )
        assert_that(
            joined | beam.FlatMap(lambda g: [(g[0], w) for w in g[1]]), equal_to([("none", "a"), ("none", "b")])
        )
    with pytest.raises(Exception, match="no value to join"):
        with BeamTestPipeline(runner="FnApiRunner") as p:
            joined = {"elements": p | "Words" >> beam.Create(["a"]), "value": p | "None" >> beam.Create([])} | (
                JoinSingleton(key=lambda w: w, by_shuffle=by_shuffle)
            )
            assert_that(joined, equal_to([]))


def test_only_dask_shuffles_broadcasts():
    from apache_beam.runners.dask.dask_runner import DaskRunner

    assert not shuffles_broadcasts(beam.Pipeline(runner="FnApiRunner"))
    assert shuffles_broadcasts(beam.Pipeline(runner=DaskRunner()))
