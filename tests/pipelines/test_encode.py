"""BPE training and the encoded Parquet shards, with Beam's TestPipeline (mechanics on real verses)."""

from __future__ import annotations

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
import sentencepiece as spm
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from core import dataset
from pipelines.config import SpmConfig
from pipelines.counting import STATS
from pipelines.encode import SAMPLE_STAT, EncodeAndWrite, TrainBpe

pytestmark = pytest.mark.beam

PHILEMON = 57  # 25 verses
# Temperature 1 and a sample larger than the pool: every training sentence is drawn exactly once.
# Full character coverage: every character of train gets a piece, so train encodes without <unk>.
SPM = SpmConfig(vocab_size=300, sample_sentences=1000, temperature=1.0, character_coverage=1.0, num_threads=1)


def normalized(text: str) -> str:
    return " ".join(text.split()).lower()


@pytest.fixture
def tuples(book_lines):
    lines = book_lines({"en": "k", "fr": "l"}, [PHILEMON])
    return [
        (f"b:{i:02d}", {"en": normalized(e), "fr": normalized(f)})
        for i, (e, f) in enumerate(zip(lines["en"], lines["fr"]))
    ]


def test_bpe_is_trained_on_train_once_per_sentence_and_counts_the_sample(tuples, book_lines):
    train = tuples[:20]
    # tuples only in the pool, with Chinese: they set the rates but are never sampled
    zh = book_lines({"zh": "c"}, [PHILEMON])["zh"]
    pool = train + [(k, {**s, "zh": normalized(z)}) for (k, s), z in zip(tuples[20:], zh[20:])]
    texts = [text for _, s in train for text in s.values()]

    def check_model(protos: list[bytes]) -> None:  # runs inside the pipeline, on a pickled copy
        assert len(protos) == 1
        sp = spm.SentencePieceProcessor(model_proto=protos[0])
        assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (
            dataset.PAD_ID,
            dataset.UNK_ID,
            dataset.BOS_ID,
            dataset.EOS_ID,
        )
        assert sp.get_piece_size() <= SPM.vocab_size
        pieces = "".join(sp.id_to_piece(i) for i in range(sp.get_piece_size()))
        assert not any("\u4e00" <= c <= "\u9fff" for c in pieces)  # nothing learned from the pool alone
        assert [sp.decode(ids) for ids in sp.encode(texts)] == texts

    with BeamTestPipeline(runner="FnApiRunner") as p:
        out = {"train": p | "Train" >> beam.Create(train), "pool": p | "Pool" >> beam.Create(pool)} | TrainBpe(SPM)
        assert_that(out["model"], check_model, label="Model")
        # 20 tuples of two languages, each sentence once; the 5 pool-only tuples not at all
        assert_that(out[STATS], equal_to([(SAMPLE_STAT, 40)]), label="Counted")


def test_shards_decode_to_the_text_sorted_by_key_with_counts(tuples, tmp_path):
    train, dev, test = tuples[:17], tuples[17:21], tuples[21:]
    train[3] = (train[3][0], {"en": train[3][1]["en"]})  # a tuple without French: nulls in its columns
    train[8] = (train[8][0], {"en": train[8][1]["en"]})
    splits = {"train": train, "dev": dev, "test": test}
    # full coverage gives pieces to train's characters only: held-out text must use no other
    seen = set("".join(t for _, s in train for t in s.values()))
    assert set("".join(t for _, s in dev + test for t in s.values())) <= seen
    shards = {"train": 2, "dev": 1, "test": 1}
    with BeamTestPipeline(runner="FnApiRunner") as p:
        inputs = {
            split: p | f"Create{split.title()}" >> beam.Create(list(reversed(rows))) for split, rows in splits.items()
        }
        inputs["pool"] = p | "CreatePool" >> beam.Create(tuples)
        stats = inputs | EncodeAndWrite(SPM, ["en", "fr"], shards, str(tmp_path))
        assert_that(
            stats | beam.CombinePerKey(sum),
            equal_to(
                [
                    ("tuples/out/train", 17),
                    ("tuples/out/dev", 4),
                    ("tuples/out/test", 4),
                    ("sentences/en/out/train", 17),
                    ("sentences/fr/out/train", 15),
                    ("sentences/en/out/dev", 4),
                    ("sentences/fr/out/dev", 4),
                    ("sentences/en/out/test", 4),
                    ("sentences/fr/out/test", 4),
                    (SAMPLE_STAT, 17 + 15),  # every training sentence once
                    ("sources/b/out/train", 17),
                    ("sources/b/out/dev", 4),
                    ("sources/b/out/test", 4),  # by key prefix
                ]
            ),
            label="Counted",
        )

    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / dataset.SPM_MODEL))
    vocab = (tmp_path / dataset.SPM_VOCAB).read_text(encoding="utf-8").splitlines()
    assert len(vocab) == sp.get_piece_size()
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.glob("*/*.parquet"))
    assert set(files) <= {
        "train/part-00000-of-00002.parquet",
        "train/part-00001-of-00002.parquet",
        "dev/part-00000-of-00001.parquet",
        "test/part-00000-of-00001.parquet",
    }
    columns = ["key", "en_text", "en_ids", "en_len", "fr_text", "fr_ids", "fr_len"]
    for split, expected in splits.items():
        rows = []
        for name in (f for f in files if f.startswith(f"{split}/")):
            table = pq.read_table(tmp_path / name)
            assert table.column_names == columns
            keys = table.column("key").to_pylist()
            assert keys == sorted(keys), name
            rows += table.to_pylist()
        assert {
            r["key"]: {lang: r[f"{lang}_text"] for lang in ("en", "fr") if r[f"{lang}_text"] is not None} for r in rows
        } == dict(expected)
        for r in rows:
            for lang in ("en", "fr"):
                text, ids, n = r[f"{lang}_text"], r[f"{lang}_ids"], r[f"{lang}_len"]
                if text is None:
                    assert ids is None and n is None
                    continue
                assert sp.decode(ids) == text
                assert n == len(ids) > 0
                assert not {dataset.BOS_ID, dataset.EOS_ID, dataset.UNK_ID} & set(ids)
