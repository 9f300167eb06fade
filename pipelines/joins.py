"""Broadcasting one small value to many elements: a side input, or on Dask a CoGroupByKey.

`JoinSingleton` gives each element the value, as `(value, [elements])` groups.
Where side inputs work well (the in-process runner, Flink, Spark, Dataflow) it
uses one, and each group is a single element: nothing is shuffled. Beam 2.77's
DaskRunner, though, evaluates a side input inside each task that reads it, by
submitting the side input's whole upstream graph again from there (a global
combine with a default is such a side input too). With side inputs, the seven
short test books on 2 Dask workers (7 partitions) read every book 2.5 times and
trained the BPE model twice; the 6-language Bible in 66 partitions had not
finished after 11 minutes (32 s in process on the same, busy, machine). On
Dask the value is therefore copied into `buckets` groups and the elements are
spread over them by a hash of their key: one graph, each step computed once.
That shuffle is not free: in process, the job's two joins done this way cost
the 6-language Bible about 2 s of CPU (+18 %), which is why only Dask gets it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import apache_beam as beam

from pipelines.tokenizer import unit_hash

# Groups per shuffle join: the parallelism of the step after it. The value is
# copied into each, so more buckets cost more copies of it.
BUCKETS = 16
_NO_DEFAULT = object()


def shuffles_broadcasts(pipeline: beam.Pipeline) -> bool:
    """Whether broadcasts in `pipeline` should be shuffle joins: on Beam's DaskRunner (see the module)."""
    return type(pipeline.runner).__name__ == "DaskRunner"


class JoinSingleton(beam.PTransform):
    """{'elements': PCollection, 'value': PCollection of at most one value} -> (value, [elements]) groups.

    Every element is in exactly one group. With no value, the groups carry
    `default`; without a default, that is an error. `by_shuffle` picks the
    shuffle join (True) or a side input (False); by default, the shuffle on Dask only.
    """

    def __init__(
        self,
        *,
        key: Callable[[Any], str],
        buckets: int = BUCKETS,
        default: Any = _NO_DEFAULT,
        by_shuffle: bool | None = None,
    ) -> None:
        super().__init__()
        self.key, self.buckets, self.default, self.by_shuffle = key, buckets, default, by_shuffle

    def expand(self, inputs: dict[str, beam.PCollection]) -> beam.PCollection:
        elements, value = inputs["elements"], inputs["value"]
        by_shuffle = self.by_shuffle if self.by_shuffle is not None else shuffles_broadcasts(elements.pipeline)
        has_default = self.default is not _NO_DEFAULT  # the sentinel's identity does not survive pickling
        if not by_shuffle:
            side = beam.pvalue.AsSingleton(value, **({"default_value": self.default} if has_default else {}))
            return elements | "WithValue" >> beam.Map(_alone_with, side)
        key, buckets = self.key, self.buckets
        keyed = elements | "ByBucket" >> beam.Map(lambda e: (int(unit_hash("bucket", key(e)) * buckets), e))
        copies = value | "IntoEveryBucket" >> beam.FlatMap(lambda v: [(b, v) for b in range(buckets)])
        return (
            {"elements": keyed, "value": copies}
            | "Join" >> beam.CoGroupByKey()
            | "WithValue" >> beam.FlatMap(_with_value, self.default, has_default)
        )


def _alone_with(element: Any, value: Any) -> tuple[Any, list[Any]]:
    if isinstance(value, beam.pvalue.EmptySideInput):  # what AsSingleton gives without a value or default
        raise ValueError("no value to join the elements with")
    return value, [element]


def _with_value(
    group: tuple[int, dict[str, Iterable[Any]]], default: Any, has_default: bool
) -> Iterator[tuple[Any, list[Any]]]:
    bucket, joined = group
    elements, values = list(joined["elements"]), list(joined["value"])
    if not elements:
        return
    if len(values) > 1:
        raise ValueError(f"bucket {bucket}: {len(values)} values to join, expected at most one")
    if not values and not has_default:
        raise ValueError(f"bucket {bucket}: no value to join {len(elements)} elements with")
    yield (values[0] if values else default), elements
