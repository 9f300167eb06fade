"""The dev rows training measures its error on: shared among a dataset's sources, each source's error apart."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from model.batching import ParallelCorpus, dev_rows_by_source


def dev_split(sizes: dict[str, int], incomplete: set[int] = frozenset()) -> ParallelCorpus:
    """A dev split as prepare writes it: sorted by key (so by source), two languages; the tuples at
    `incomplete` lack their French."""
    keys = sorted(f"{source}:{i:04d}" for source, n in sizes.items() for i in range(n))
    ids = {"en": [[1, 2]] * len(keys), "fr": [[] if r in incomplete else [3] for r in range(len(keys))]}
    return ParallelCorpus(["en", "fr"], {lang: pa.array(v, pa.list_(pa.int32())) for lang, v in ids.items()}, keys)


def test_one_source_keeps_the_first_complete_rows():
    dev = dev_split({"bible": 10}, incomplete={2})
    rows, by_source = dev_rows_by_source(dev, 4)
    assert rows.tolist() == [0, 1, 3, 4] and by_source == {}
    assert dev_rows_by_source(dev, None)[0].tolist() == [0, 1, 3, 4, 5, 6, 7, 8, 9]


def test_the_limit_is_shared_evenly_and_a_small_source_leaves_its_share_to_the_others():
    dev = dev_split({"bible": 50, "catalogs": 50, "tmx": 3})
    rows, by_source = dev_rows_by_source(dev, 30)
    names = dev.source_names()[rows]
    assert len(rows) == 30 and list(rows) == sorted(rows)
    assert {n: int((names == n).sum()) for n in set(names.tolist())} == {"bible": 14, "catalogs": 13, "tmx": 3}
    for name, at in by_source.items():  # positions among the rows, each source's own
        assert set(names[at].tolist()) == {name}
    assert sorted(np.concatenate(list(by_source.values())).tolist()) == list(range(30))
    rows, by_source = dev_rows_by_source(dev, None)  # no limit: every complete row
    assert len(rows) == 103 and {n: len(a) for n, a in by_source.items()} == {"bible": 50, "catalogs": 50, "tmx": 3}
