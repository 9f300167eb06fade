"""`interlingua evaluate` on a model trained on real Bible text: Ray Data embeddings on disk, Ray sharded
search reading them, the MLflow matrix; the same metrics as embedding and searching in memory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.dataset import file_sha256, read_split
from evaluation.store import StoredEmbeddings
from evaluation.xsim import pair_metrics, search_pairs
from orchestration.adapters import tracking
from orchestration.adapters.cluster import data_job
from orchestration.evaluate import EvaluateError
from orchestration.evaluate.embedding import complete_tuples, embed_split, key_ordered
from orchestration.evaluate.job import evaluate
from tests.support.runs import config_for

LANGS = ["en", "fr", "es", "ru", "ar", "zh"]


def interleaved_shards(data_dir: Path, out: Path) -> Path:
    """The dataset with its test split in two shards of alternate rows: key ranges that overlap."""
    shutil.copytree(data_dir, out)
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["splits"]["test"]
    table = pa.concat_tables([pq.read_table(out / f["path"]) for f in entry["files"]])
    for f in entry["files"]:
        (out / f["path"]).unlink()
    entry["files"] = []
    for i in range(2):
        path = f"test/part-0000{i}-of-00002.parquet"
        pq.write_table(table.take(list(range(i, len(table), 2))), out / path)
        entry["files"].append(
            {"path": path, "rows": len(range(i, len(table), 2)), "bytes": 0, "sha256": file_sha256(out / path)}
        )
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def in_memory_metrics(config, model_path):
    """The route before embeddings went to disk: the split's complete tuples read whole, embedded in this
    process, searched in memory, texts compared as strings."""
    from model.inference import embed
    from model.model_file import load_model

    table = read_split(config.data_dir, "test").sort_by("key")
    complete = np.all([table[f"{lang}_ids"].is_valid().to_numpy(zero_copy_only=False) for lang in LANGS], axis=0)
    table = table.filter(complete)
    model, _ = load_model(str(model_path))
    embeddings = {
        lang: embed(
            model,
            [np.asarray(ids, np.int64) for ids in table[f"{lang}_ids"].to_pylist()],
            lang,
            max_tokens=config.evaluate.max_tokens,
        )
        for lang in LANGS
    }
    texts = {lang: table[f"{lang}_text"].to_pylist() for lang in LANGS}
    results = search_pairs(embeddings, shards=1, k=5)
    return {f"{p}-{q}": m for (p, q), m in pair_metrics(results, texts, metric="cosine", margin_k=4).items()}


def test_shards_read_in_key_order_need_no_sort(tmp_path):
    def shard(name, keys):
        pq.write_table(pa.table({"key": pa.array(keys, pa.string())}), tmp_path / name)
        return str(tmp_path / name)

    a, b, empty = shard("a.parquet", ["k3", "k4"]), shard("b.parquet", ["k1", "k2"]), shard("e.parquet", [])
    assert key_ordered([a, b, empty]) == [b, a, empty]
    assert key_ordered([a, shard("c.parquet", ["k2", "k5"])]) is None  # overlapping ranges
    assert key_ordered([shard("d.parquet", ["k2", "k1"])]) is None  # a shard out of order


def test_embeddings_that_fail_leave_no_staging_and_the_previous_ones_whole(tmp_path):
    """The driver writes the blocks into a staging folder and commits it once they are all there; an error
    before the commit removes the staging folder and leaves the previous embeddings as they were."""
    from evaluation.store_writer import write_block
    from orchestration.evaluate.embedding import _stored

    folder = tmp_path / "embeddings"

    def block(staging, value: float):
        return write_block(staging.local, ["a", "b"], {"en": np.full((2, 3), value, np.float32)}, {"en": ["x", "y"]})

    with _stored(folder, ["en"], None) as (staging, records):
        assert staging.local == tmp_path / ".embeddings.partial"
        records.append(block(staging, 1.0))
    with pytest.raises(EvaluateError, match="fails"), _stored(folder, ["en"], None) as (staging, records):
        records.append(block(staging, 2.0))
        raise EvaluateError("the run fails before its commit")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["embeddings"]
    assert StoredEmbeddings.open(folder).rows("en", 0, 2)[0, 0] == 1.0


def _offline(job, monkeypatch, fingerprint: str) -> None:
    """`job.evaluate` with its encoder, data checks, tracking store and Ray stood in for: its staging and commit
    alone run."""
    from types import SimpleNamespace

    from orchestration.evaluate.encoder import Encoder

    monkeypatch.setattr(job, "resolve_encoder", lambda *a, **k: Encoder(None, ["en", "fr"], None))
    monkeypatch.setattr(job, "_verified_data", lambda config, texts: ("data-fp", {}))
    monkeypatch.setattr(job, "eval_fingerprint", lambda *a: fingerprint)
    monkeypatch.setattr(job, "Tracker", SimpleNamespace(of=lambda c: SimpleNamespace(check_reachable=lambda: None)))
    monkeypatch.setattr(job, "ensure_ray", lambda *a, **k: None)
    monkeypatch.setattr(job, "check_every_node_reaches", lambda **k: None)


def test_an_evaluation_in_a_store_is_staged_locally_committed_state_last_and_leaves_no_stale_file(
    tmp_path, monkeypatch
):
    """With the run dir at a URI, the evaluation is made whole in a local scratch folder (nothing of the earlier
    one is copied down or opened); the commit uploads it, `state.json` last, and removes the earlier files the
    new one lacks; a failed evaluation uploads nothing and leaves the earlier one as it was."""
    from core import storage
    from orchestration.config import load_config
    from orchestration.evaluate import job

    config = load_config(None, [f"run_dir=file://{tmp_path}/run", f"dataset_dir={tmp_path}/data"])
    folder = f"{config.eval_dir}/{config.evaluate.split}"
    earlier = {
        "state.json": b'{"fingerprint": "0f", "run_id": "r0", "data": "data-fp"}',
        "metrics.json": b'{"pairs": {"en-fr": {"error": 0.5}}}',  # which vouches for the pair's search files
        "search/en-fr/ids.npy": b"ids",
    }
    for name, data in earlier.items():
        storage.write_bytes(f"{folder}/{name}", data)
    _offline(job, monkeypatch, "1f")

    def measured(config, encoder, out_dir, *args):
        assert not list(out_dir.rglob("*.json")), "the staging folder starts empty"
        (out_dir / "search" / "en-fr").mkdir(parents=True)
        (out_dir / "search" / "en-fr" / "scores.npy").write_text("scores")
        (out_dir / "metrics.json").write_text('{"pairs": {"en-fr": {}}, "averages": {}}')
        return job.EvalResult({}, {}, {}, ["en", "fr"], "r1", out_dir)

    monkeypatch.setattr(job, "_measure", measured)
    assert job.evaluate(config).out_dir == folder
    assert sorted(storage.files(folder)) == ["metrics.json", "search/en-fr/scores.npy", "state.json"]
    assert storage.read_json(f"{folder}/state.json")["run_id"] == "r1"

    def failed(config, encoder, out_dir, *args):
        (out_dir / "metrics.json").write_text("{}")
        raise EvaluateError("the search failed")

    _offline(job, monkeypatch, "2f")
    monkeypatch.setattr(job, "_measure", failed)
    with pytest.raises(EvaluateError, match="search failed"):
        job.evaluate(config)
    assert storage.read_json(f"{folder}/state.json")["run_id"] == "r1"
    assert storage.read_bytes(f"{folder}/metrics.json") == b'{"pairs": {"en-fr": {}}, "averages": {}}'


def test_an_evaluation_whose_data_changes_while_it_runs_records_nothing(tmp_path, monkeypatch):
    """The probe's shared dataset swapped during `evaluate`: the data is verified again before the commit, so
    a number measured on other data than the verified one is never recorded, and no rerun answers with it."""
    from core.dataset import DatasetError
    from orchestration.config import load_config
    from orchestration.evaluate import job

    config = load_config(None, [f"run_dir={tmp_path}/run", f"dataset_dir={tmp_path}/data"])
    _offline(job, monkeypatch, "1f")
    seen = iter([("data-fp", {"test/shard-0.parquet": "aa"}), ("data-fp", {"test/shard-0.parquet": "bb"})])
    monkeypatch.setattr(job, "_verified_data", lambda config, texts: next(seen))

    def measured(config, encoder, out_dir, *args):
        (out_dir / "metrics.json").write_text('{"pairs": {}, "averages": {}}')
        return job.EvalResult({}, {}, {}, ["en", "fr"], "r1", out_dir)

    monkeypatch.setattr(job, "_measure", measured)
    with pytest.raises(DatasetError, match="changed while it was evaluated"):
        job.evaluate(config)
    folder = tmp_path / "run" / "eval" / config.evaluate.split
    assert not folder.exists() and not [p for p in folder.parent.iterdir() if "partial" in p.name]


def test_evaluate_a_trained_model_fills_the_matrix_in_mlflow(trained_run, tmp_path):
    """Slow (the first test of its process to ask for `trained_run` pays for its one training, about 30
    CPU-seconds, in its setup; the evaluation itself is a Ray Data job of three shards)."""
    config, trained = trained_run.config("evaluate.shards=3"), trained_run.result
    result = evaluate(config)
    assert set(result.matrix) == {(p, q) for p in LANGS for q in LANGS if p != q}
    assert all(0.0 <= e <= 1.0 for e in result.matrix.values())
    fr_en = result.pairs["fr-en"]
    assert fr_en["p_at_1"] == pytest.approx(1 - fr_en["error"])
    assert fr_en["p_at_5"] >= fr_en["p_at_1"] and fr_en["mean_rank"] >= 1
    assert set(result.averages) == {"all", "ef", "efs", "efsr", "efsra", "efsraz"}
    assert result.averages["efsraz"] == pytest.approx(result.averages["all"])
    assert (result.out_dir / "embeddings" / "fr" / "part-00000.npy").is_file()
    assert "translation" not in json.loads((result.out_dir / "metrics.json").read_text())  # translation_rows 0
    # the streamed job gives exactly the metrics of the in-memory route
    assert result.pairs == in_memory_metrics(config, Path(config.train_dir) / "model" / "model.safetensors")

    # small batches: many blocks, published in key order, aligned, the same vectors; read by Ray Data's tasks
    # (a large split's way) where the evaluation read the split here (a small one's)
    store = StoredEmbeddings.open(result.out_dir / "embeddings")
    blocks = embed_split(
        config,
        Path(config.train_dir) / "model" / "model.safetensors",
        LANGS,
        tmp_path / "blocks",
        batch_rows=7,
        read_here_rows=0,
    )
    assert len(blocks.starts) > 3 and blocks.starts[-1] == 40  # blocks as Ray Data cut the batches
    assert list(blocks.column("key")) == list(store.column("key")) == sorted(store.column("key"))
    for lang in LANGS:
        np.testing.assert_allclose(blocks.rows(lang, 0, 40), store.rows(lang, 0, 40), rtol=1e-5, atol=1e-6)
        assert list(blocks.column(f"{lang}_text")) == list(store.column(f"{lang}_text"))
    # shards whose keys interleave: Ray Data sorts them, the same rows in the same order
    two = config.model_copy(update={"dataset_dir": str(interleaved_shards(config.data_dir, tmp_path / "two"))})
    assert key_ordered([str(p) for p in sorted((Path(two.data_dir) / "test").iterdir())]) is None
    sorted_store = embed_split(two, Path(config.train_dir) / "model" / "model.safetensors", LANGS, tmp_path / "sorted")
    assert list(sorted_store.column("key")) == list(store.column("key"))
    np.testing.assert_allclose(sorted_store.rows("zh", 0, 40), store.rows("zh", 0, 40), rtol=1e-5, atol=1e-6)
    with data_job(preserve_order=True):  # read here and sorted by Arrow, or sorted by Ray Data: the same tuples
        here, there = (complete_tuples(two, LANGS, False, read_here_rows=n).take_all() for n in (10**6, 0))
    assert [row["key"] for row in here] == [row["key"] for row in there] == list(store.column("key"))
    assert [list(row["zh_ids"]) for row in here] == [list(row["zh_ids"]) for row in there]

    again = evaluate(config)  # the same model, data and evaluate config: the stage cache answers
    assert again.skipped and again.run_id == result.run_id and again.matrix == result.matrix
    assert not evaluate(config, force=True).skipped
    assert "zh" in result.format_matrix()
    # one translation per language, searched unsharded: only the languages asked for, and each pair's error
    # that of the three-shard search of all six; with the model's decoders (its NMT loss was on), each
    # language's first 12 sentences decoded into each language, itself too, scored by BLEU and chrF; the verses'
    # book groups learned from English vectors of half the chapters, tested in each language on the other half
    three = config.evaluate.model_copy(
        update={
            "languages": ["en", "fr", "zh"],
            "shards": 1,
            "translation_rows": 12,
            "transfer": ["bible_books"],
            "transfer_languages": ["en"],
        }
    )
    subset = evaluate(config.model_copy(update={"evaluate": three}))
    assert set(subset.matrix) == {(p, q) for p in ("en", "fr", "zh") for q in ("en", "fr", "zh") if p != q}
    assert all(subset.matrix[pair] == result.matrix[pair] for pair in subset.matrix) and not subset.skipped
    translated = json.loads((subset.out_dir / "metrics.json").read_text())["translation"]
    assert set(translated) == {f"{p}-{q}" for p in ("en", "fr", "zh") for q in ("en", "fr", "zh")}
    assert all(0 <= m["bleu"] <= 100 and 0 <= m["chrf"] <= 100 for m in translated.values())
    logged = tracking.get_run(config.tracking.uri, subset.run_id).data.metrics
    assert logged["eval/chrf/fr-en"] == translated["fr-en"]["chrf"] and "eval/bleu/roundtrip_bleu" not in logged
    assert {"eval/bleu", "eval/chrf", "eval/roundtrip_bleu", "eval/roundtrip_chrf"} <= set(logged)
    assert {"translation_bleu.json", "translation_chrf.json"} <= set(
        tracking.artifacts(config.tracking.uri, subset.run_id)
    )
    transfer = json.loads((subset.out_dir / "metrics.json").read_text())["transfer"]["bible_books"]
    assert set(transfer["accuracy"]) == {"en-en", "en-fr", "en-zh"} and len(transfer["classes"]) == 3
    assert transfer["train_rows"] + transfer["test_rows"] == 40 and all(
        0 <= v <= 1 for v in transfer["accuracy"].values()
    )
    assert logged["eval/transfer/bible_books/en-fr"] == transfer["accuracy"]["en-fr"]
    assert logged["eval/transfer/bible_books/avg_gap"] == transfer["averages"]["gap"]
    assert "transfer_bible_books.json" in tracking.artifacts(config.tracking.uri, subset.run_id)
    with pytest.raises(EvaluateError, match=r"transfer_languages: \['es'\] are not evaluated"):
        evaluate(config.model_copy(update={"evaluate": three.model_copy(update={"transfer_languages": ["es"]})}))
    with pytest.raises(EvaluateError, match=r"\['xx'\] are not among them"):
        evaluate(config.model_copy(update={"evaluate": three.model_copy(update={"languages": ["en", "xx"]})}))

    uri = config.tracking.uri
    run = tracking.get_run(uri, result.run_id)
    assert run.data.tags["mlflow.parentRunId"] == trained.run_id
    assert run.data.metrics["eval/xsim_error/fr-en"] == pytest.approx(result.matrix[("fr", "en")])
    assert "eval/margin_error/fr-en" in run.data.metrics and "eval/xsim_error/avg_efs" in run.data.metrics
    names = set(tracking.artifacts(uri, result.run_id))
    assert {"error_matrix.png", "error_matrix.csv", "metrics.json"} <= names


def test_an_exported_model_is_evaluated_on_its_fp32_export_and_on_int8_only_when_asked(
    small_dataset, tmp_path, local_ray
):
    from orchestration.cli import main
    from tests.support.runs import untrained_model_dir

    model = untrained_model_dir(small_dataset, tmp_path / "model")
    runs, results = {}, []
    for backend in ("torch", "auto", "auto", "onnx-int8"):  # the export is written after the torch run
        config = config_for(small_dataset, tmp_path, f"runtime.backend={backend}", "evaluate.shards=2")
        result = evaluate(config, model_dir=model)
        store = StoredEmbeddings.open(result.out_dir / "embeddings")
        ran = tracking.get_run(config.tracking.uri, result.run_id).data.tags[tracking.BACKEND_TAG]
        assert store.meta["backend"] == ran
        runs.setdefault(ran, {lang: store.rows(lang) for lang in store.languages})
        results.append(result)
        if backend == "torch":
            assert main(["export", "--model", str(model)]) == 0
    assert list(runs) == ["torch", "onnx", "onnx-int8"]  # auto: the exact export, never int8
    assert results[2].skipped and results[2].run_id == results[1].run_id  # auto again: answered by the cache
    assert not results[3].skipped  # int8 is another evaluation, not the cached fp32 one
    for lang, torch_rows in runs["torch"].items():
        np.testing.assert_allclose(runs["onnx"][lang], torch_rows, atol=1e-4)
        assert not np.allclose(runs["onnx-int8"][lang], torch_rows, atol=1e-6)  # int8 is another engine
