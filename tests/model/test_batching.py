"""Training batches streamed from the shards: windows, per-window plans, resuming at a data position,
disjoint workers, padding and token budgets (on the real Bible token ids of the test dataset)."""

from __future__ import annotations

import functools
import multiprocessing

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from core.dataset import EOS_ID, PAD_ID, split_files
from model.batching import ParallelCorpus, pad, read_units, sample_corpus, shard_units, token_budget_batches
from model.prefetch import prefetched
from model.stream import PLAN, BatchStream, DataPosition, epoch_windows, plan_window
from model.training_paths import TrainingPath

LANGS = ["en", "fr", "es", "ru", "ar", "zh"]


@pytest.fixture(scope="module")
def units(small_dataset):
    return shard_units(split_files(small_dataset.data_dir, "train"))


def stream(units, **kwargs) -> BatchStream:
    args = dict(seed=0, rank=0, world=1, max_tokens=300, window_tuples=80, paths=[TrainingPath(kind="1:N")])
    args.update(kwargs)
    return BatchStream(units, LANGS, args.pop("paths"), **args)


def batch_ids(batch) -> list[tuple]:
    """A batch as plain values: epoch, signature, every token id and the teacher's vectors."""
    tensors = [
        t for pair in (*batch.sources.values(), *batch.targets.values(), *(batch.teacher or {}).values()) for t in pair
    ]
    weight = batch.teacher_weight.tolist() if batch.teacher_weight is not None else None
    return [batch.epoch, batch.signature, sorted(batch.teacher or {}), weight, *[t.tolist() for t in tensors]]


_stream = stream


def test_units_are_the_row_groups_and_windows_are_bounded(units, small_dataset):
    total = sum(u.rows for u in units)
    assert len(units) == 3 and total == len(ParallelCorpus.read(small_dataset.data_dir, "train", LANGS).lengths["en"])
    windows = epoch_windows(units, seed=0, epoch=0, rank=0, world=1, window_tuples=1)
    assert [len(w) for w in windows] == [1, 1, 1]  # a unit larger than the window is a window of its own
    whole = epoch_windows(units, seed=0, epoch=0, rank=0, world=1, window_tuples=10**6)
    assert len(whole) == 1 and sorted(u.path for u in whole[0]) == sorted(u.path for u in units)
    orders = {
        tuple(w[0].path for w in epoch_windows(units, seed=0, epoch=e, rank=0, world=1, window_tuples=1))
        for e in range(8)
    }
    assert len(orders) > 1  # every epoch its own order


def test_workers_never_see_the_same_tuple_in_one_epoch(units):
    shares = [epoch_windows(units, seed=3, epoch=0, rank=r, world=2, window_tuples=10**6) for r in (0, 1)]
    mine = [{(u.path, u.row_group) for w in share for u in w} for share in shares]
    assert not mine[0] & mine[1] and len(mine[0] | mine[1]) == len(units)
    with pytest.raises(ValueError, match="more training shards"):
        stream(units, world=len(units) + 1)


def test_window_plans_are_deterministic_complete_and_within_budget(units):
    corpus = read_units(units[:1], LANGS)
    paths = [TrainingPath(kind="1:1"), TrainingPath(kind="M:1", weight=0.5)]
    kwargs = dict(seed=3, epoch=0, rank=0, window=0, max_tokens=400)
    plan = plan_window(corpus, paths, **kwargs)
    assert [(s, r.tolist()) for s, r in plan] == [(s, r.tolist()) for s, r in plan_window(corpus, paths, **kwargs)]
    rows = np.concatenate([r for _, r in plan])
    assert sorted(rows.tolist()) == list(range(corpus.size))  # every tuple serves some path, once
    for signature, batch in plan:
        langs = signature[0] + signature[1]
        longest = max(int(corpus.lengths[lang][batch].max()) + 1 for lang in langs)
        assert len(batch) * longest <= 400 or len(batch) == 1
        assert all(corpus.lengths[lang][batch].min() > 0 for lang in langs)
    other = plan_window(corpus, paths, **{**kwargs, "window": 1})
    assert [r.tolist() for _, r in other] != [r.tolist() for _, r in plan]


def test_a_stream_resumed_at_its_position_gives_the_same_batches(units):
    full = stream(units)
    seen, positions, digests = [], [], []
    for _ in range(60):  # crosses windows and an epoch boundary
        positions.append(full.position)
        seen.append(batch_ids(next(full)))
        digests.append(full.digest)
    assert seen[-1][0] >= 1 and len({(p.epoch, p.window) for p in positions}) > 3
    for k in (1, 23, 37):
        resumed = stream(units, position=positions[k], digest=digests[k - 1])
        assert [batch_ids(next(resumed)) for _ in range(60 - k)] == seen[k:]
        assert resumed.digest == digests[-1]  # the chain proves the same batches were seen
    assert stream(units, position=DataPosition(0, 0, 5)).digest == ""


def test_a_position_of_another_plan_version_is_refused(units):
    old = DataPosition.from_dict({"epoch": 2, "window": 1, "batch": 7})  # saved before plans had versions
    assert old.plan == 1 and DataPosition().plan == PLAN != 1
    with pytest.raises(ValueError, match=f"plan 1, but this version plans windows with plan {PLAN}"):
        stream(units, position=old)


def test_the_statistics_sample_is_bounded_and_in_shard_order(units):
    one = sample_corpus(units, LANGS, max_tuples=1)
    assert one.size == units[0].rows  # at least one whole unit
    everything = sample_corpus(units, LANGS, max_tuples=10**6)
    first = read_units(units, LANGS)
    assert everything.size == first.size
    np.testing.assert_array_equal(everything.values["fr"], first.values["fr"])


def test_token_budget_batches():
    costs = np.array([5, 1, 9, 3, 3, 20, 2])
    batches = token_budget_batches(costs, max_tokens=10)
    assert sorted(np.concatenate(batches).tolist()) == list(range(7))
    for batch in batches:
        assert len(batch) * costs[batch].max() <= 10 or len(batch) == 1
    assert [costs[b].tolist() for b in batches][-1] == [20]  # over budget: alone


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(4, 8000), max_size=12), min_size=1, max_size=9), st.booleans())
def test_padding_lays_each_sequence_at_the_start_of_its_row(sequences, eos):
    arrays = [np.array(s, dtype=np.int64) for s in sequences]
    if not eos and min(map(len, arrays)) == 0:
        with pytest.raises(ValueError, match="empty"):
            pad(arrays, eos=eos)
        return
    ids, lengths = pad(arrays, eos=eos)
    assert lengths.tolist() == [len(s) + eos for s in sequences]
    assert ids.shape == (len(sequences), max(lengths.tolist()))
    for row, seq in zip(ids.tolist(), sequences):
        expected = seq + [EOS_ID] * eos
        assert row == expected + [PAD_ID] * (len(row) - len(expected))


def test_a_corpus_batch_is_the_padding_of_its_rows(units):
    corpus = read_units(units[:2], LANGS)
    rows = np.random.default_rng(3).permutation(corpus.size)[:17]
    rows = rows[[bool(corpus.lengths["en"][r] and corpus.lengths["zh"][r]) for r in rows]]
    sources, targets = corpus.batch((("en",), ("zh",)), rows)
    for (ids, lengths), lang, eos in ((sources["en"], "en", True), (targets["zh"], "zh", False)):
        expected_ids, expected_lengths = pad([corpus.ids(lang, r) for r in rows], eos=eos)
        assert ids.tolist() == expected_ids.tolist() and lengths.tolist() == expected_lengths.tolist()
        assert lengths.tolist() == (corpus.lengths[lang][rows] + eos).tolist()


@pytest.mark.parametrize("extra", ["none", "weights and a teacher"])
def test_a_prefetched_stream_gives_the_same_batches_and_positions(units, extra, teacher):
    """Also with source weights and a teacher, which the loader's process rebuilds the stream with."""
    from core.teacher import TeacherInput

    if extra != "none":
        source = read_units(units[:1], LANGS, keys=True).keys[0].split(":", 1)[0]
        kwargs = dict(source_weights={source: 0.5}, teacher=TeacherInput(teacher, "en", source_weights={source: 0.25}))
        stream = functools.partial(_stream, **kwargs)
    else:
        stream = _stream
    before = set(multiprocessing.active_children())
    plain, ahead = stream(units), prefetched(stream(units), 4)
    workers = [p for p in multiprocessing.active_children() if p not in before]
    try:
        for _ in range(25):
            assert batch_ids(next(ahead)) == batch_ids(next(plain))
            assert (ahead.position, ahead.digest) == (plain.position, plain.digest)  # the consumed batch's
    finally:
        ahead.close()
    # closed with batches still queued: the worker exits cleanly, never by SIGABRT (benchmarks/prefetch_close.py)
    assert len(workers) == 1 and workers[0].exitcode == 0
    with pytest.raises(ValueError, match="closed"):
        next(ahead)
    resumed = prefetched(stream(units, position=ahead.position, digest=ahead.digest), 3)
    try:
        assert [batch_ids(next(resumed)) for _ in range(5)] == [batch_ids(next(plain)) for _ in range(5)]
    finally:
        resumed.close()
    assert prefetched(plain, 0) is plain


def test_source_weights_draw_each_tuple_as_often_as_its_source_says(units):
    corpus = read_units(units[:1], LANGS, keys=True)
    half = corpus.size // 2  # the first half's tuples relabelled as another source's (their keys only)
    corpus.keys = [f"other:{k.split(':', 1)[1]}" if i < half else k for i, k in enumerate(corpus.keys)]
    source = corpus.keys[-1].split(":", 1)[0]
    kwargs = dict(paths=[TrainingPath(kind="1:N")], seed=3, rank=0, window=0, max_tokens=400)

    def drawn(weights, epoch=0):
        rows = np.concatenate([r for _, r in plan_window(corpus, epoch=epoch, source_weights=weights, **kwargs)])
        return np.bincount(rows, minlength=corpus.size)

    assert drawn({}).tolist() == [1] * corpus.size == drawn({source: 1.0, "other": 1.0}).tolist()
    assert [r.tolist() for _, r in plan_window(corpus, epoch=0, **kwargs)] == [
        r.tolist() for _, r in plan_window(corpus, epoch=0, source_weights={}, **kwargs)
    ]  # the plan of before
    counts = drawn({source: 3.0, "other": 0.0})
    assert set(counts[:half]) == {0} and set(counts[half:]) == {3}
    # a tuple drawn three times is in three batches: in one batch it would be its own ranking negative
    batches = [r for _, r in plan_window(corpus, epoch=0, source_weights={source: 3.0}, **kwargs)]
    assert all(len(set(r.tolist())) == len(r) for r in batches)
    assert sum(map(len, batches)) == 3 * (corpus.size - half) + half
    fractions = [drawn({"other": 0.5}, epoch) for epoch in range(2)]
    for counts in fractions:
        assert set(counts[half:]) == {1} and set(counts[:half]) <= {0, 1}
        assert 0.25 * half < counts[:half].sum() < 0.75 * half
    assert fractions[0].tolist() == drawn({"other": 0.5}, 0).tolist()  # seeded: the same again
    assert fractions[0].tolist() != fractions[1].tolist()  # another half each epoch
    with pytest.raises(ValueError, match="keys"):
        plan_window(read_units(units[:1], LANGS), epoch=0, source_weights={"other": 2.0}, **kwargs)


@pytest.fixture(scope="module")
def teacher(small_dataset, tmp_path_factory):
    from tests.support.teachers import synthetic_store

    # the teacher lacks "zh": such a language gets only the pivot's target
    return synthetic_store(small_dataset.data_dir, tmp_path_factory.mktemp("teacher"), LANGS[:-1])


def test_a_stream_with_a_teacher_hands_each_batch_its_sources_and_pivots_teacher_rows(units, teacher):
    from core.teacher import TeacherInput
    from model.nmt import PIVOT
    from tests.support.teachers import key_vector

    plain = stream(units, paths=[TrainingPath(kind="M:1", m=2)], teacher=TeacherInput(teacher, "en"))
    keys = read_units(units, LANGS, keys=True).keys
    seen = set()
    for _ in range(40):
        batch = next(plain)
        corpus = plain._corpus
        rows = plain._plan[plain.position.batch - 1][1]
        assert set(batch.teacher) == {lang for lang in batch.signature[0] if lang != "zh"} | {PIVOT}
        for lang, (vectors, has) in batch.teacher.items():
            name = "en" if lang == PIVOT else lang
            assert vectors.dtype == torch.float32 and has.tolist() == [corpus.lengths[name][r] > 0 for r in rows]
            for row, vector, present in zip(rows, vectors, has):
                expected = key_vector(corpus.keys[row], name, 8) if present else np.zeros(8, np.float16)
                assert vector.tolist() == expected.astype(np.float32).tolist()
        seen |= set(batch.signature[0])
    assert "zh" in seen and len(keys) == sum(u.rows for u in units)


def test_a_stream_hands_each_batch_its_rows_teacher_weights_by_source(units, teacher):
    """`TeacherInput.source_weights`: each row's weight is its source's (1 for a source not named); without
    weights a batch carries none (each row's term counts once)."""
    from core.teacher import TeacherInput

    source = read_units(units[:1], LANGS, keys=True).keys[0].split(":", 1)[0]
    assert next(stream(units, teacher=TeacherInput(teacher, "en"))).teacher_weight is None
    for weights, expected in (({source: 0.25}, 0.25), ({"other": 3.0}, 1.0)):
        weighted = stream(units, teacher=TeacherInput(teacher, "en", source_weights=weights))
        for _ in range(10):
            batch = next(weighted)
            rows = weighted._plan[weighted.position.batch - 1][1]
            assert batch.teacher_weight.dtype == torch.float32 and len(batch.teacher_weight) == len(rows)
            assert [weighted._corpus.keys[r].split(":", 1)[0] for r in rows] == [source] * len(rows)
            assert batch.teacher_weight.tolist() == [expected] * len(rows)


def test_a_stream_distilling_every_language_hands_each_batch_the_teacher_rows_of_its_targets_too(units, teacher):
    from core.teacher import TeacherInput
    from model.nmt import PIVOT

    every = stream(units, paths=[TrainingPath(kind="1:N")], teacher=TeacherInput(teacher, "en", every_language=True))
    for _ in range(20):
        batch = next(every)
        languages = set(batch.signature[0]) | set(batch.signature[1])
        assert len(languages) > 1 and set(batch.teacher) == (languages - {"zh"}) | {PIVOT}


def test_teacher_rows_that_are_not_the_shards_are_refused(units, small_dataset, tmp_path):
    from tests.support.teachers import synthetic_store

    wrong = synthetic_store(small_dataset.data_dir, tmp_path / "t", ["en"], reverse=True)
    with pytest.raises(ValueError, match="not of this dataset"):
        read_units(units[:1], LANGS, teacher=wrong)
