"""Lineage and verify-on-read: a model is never fed token ids of another tokenizer, and damaged model or
dataset files are named before any work (exit 2, one line). Real Bible text, untrained tiny models."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from core.dataset import Dataset, DatasetManifest, load_manifest
from orchestration.adapters import model_dir as model_files
from orchestration.cli import main
from orchestration.embedding.embedder import SentenceEmbedder
from pipelines.config import SpmConfig
from pipelines.tokenizer import train_bpe
from tests.support.corpus import VERSIONS
from tests.support.runs import config_for, untrained_model_dir

# Genesis and Matthew: other verses than the dataset's seven short books, so another BPE model
OTHER_BOOKS = [1, 40]


@pytest.fixture
def where(small_dataset, tmp_path):
    config = config_for(small_dataset, tmp_path)
    return [
        f"run_dir={config.run_dir}",
        f"dataset_dir={config.data_dir}",
        f"tracking.uri={config.tracking.uri}",
        "prepare.spm.vocab_size=2000",
    ]


def other_tokenizer(book_lines, path):
    """A sentencepiece model trained on other real verses (ids within the dataset's vocabulary)."""
    lines = [text for texts in book_lines(VERSIONS, OTHER_BOOKS).values() for text in texts[:300]]
    path.write_bytes(train_bpe(lines, SpmConfig(vocab_size=1000)))
    return path


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("interlingua")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_evaluate_refuses_a_model_of_another_tokenizer_naming_both(small_dataset, tmp_path, book_lines, where, capsys):
    model = untrained_model_dir(small_dataset, tmp_path / "model")
    other_tokenizer(book_lines, model / model_files.SPM_FILE)  # an old model dir: no lineage.json
    data_sha = load_manifest(small_dataset.data_dir).dump()["spm"]["sha256"]
    model_sha = model_files.verify(model)["spm_sha256"]
    assert main(["evaluate", "--model", str(model), *where]) == 2
    line = one_line(capsys.readouterr().err)
    assert model_sha[:12] in line and data_sha[:12] in line and "tokenizer" in line
    assert not (tmp_path / "run" / "eval").exists()  # refused before any work

    elsewhere = Dataset("elsewhere", DatasetManifest.model_construct(fingerprint="other"))
    model_files.record_lineage(model, elsewhere)  # a model that records its lineage
    assert main(["evaluate", "--model", str(model), *where]) == 2
    assert model_sha[:12] in one_line(capsys.readouterr().err)


def test_a_damaged_model_file_is_named_by_every_reader(small_dataset, tmp_path, where, capsys):
    model = untrained_model_dir(small_dataset, tmp_path / "model")
    text = tmp_path / "en.txt"
    text.write_text("In the beginning God created the heaven and the earth.\n")
    path = model / model_files.MODEL_FILE
    path.write_bytes(path.read_bytes()[:1000])  # truncated, no lineage.json to compare with
    for command in (
        ["evaluate", "--model", str(model)],
        ["embed", "--model", str(model), "-l", "en", "-i", str(text), "-o", str(tmp_path / "e.npy")],
    ):
        assert main([*command, *where]) == 2
        line = one_line(capsys.readouterr().err)
        assert f"{path}: not a readable model file" in line and "Errno" not in line

    model = untrained_model_dir(small_dataset, tmp_path / "recorded")
    model_files.record_lineage(model, Dataset.open(small_dataset.data_dir))
    shutil.copy(tmp_path / "model" / model_files.MODEL_FILE, model / model_files.MODEL_FILE)
    (model / model_files.SPM_FILE).write_bytes(b"")
    for command in (
        ["evaluate", "--model", str(model)],
        ["search", "--model", str(model), "-q", "Dieu est amour.", "-l", "fr"],
        ["embed", "--model", str(model), "-l", "en", "-i", str(text), "-o", str(tmp_path / "e.npy")],
    ):
        assert main([*command, *where]) == 2
        line = one_line(capsys.readouterr().err)
        assert str(model / model_files.MODEL_FILE) in line and "recorded in lineage.json" in line


def _truncated_model(model, book_lines):
    path = model / model_files.MODEL_FILE
    path.write_bytes(path.read_bytes()[:1000])
    return f"{path}: sha256"  # lineage.json records the whole file


def _another_tokenizer(model, book_lines):
    other_tokenizer(book_lines, model / model_files.SPM_FILE)
    return f"{model / model_files.SPM_FILE}: sha256"


def _not_a_tokenizer(model, book_lines):
    (model / model_files.LINEAGE_FILE).unlink()  # a model exported before lineage.json: only loading it tells
    (model / model_files.SPM_FILE).write_bytes(b"not a sentencepiece model")
    return f"{model / model_files.SPM_FILE}: not a readable sentencepiece model"


@pytest.mark.parametrize("damage", [_truncated_model, _another_tokenizer, _not_a_tokenizer])
def test_embed_names_a_damaged_model_before_ray_starts(
    damage, small_dataset, tmp_path, book_lines, where, capsys, monkeypatch
):
    import ray

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was started for a damaged model")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # whatever an earlier test left running
    monkeypatch.setattr(ray, "init", no_ray)
    model = untrained_model_dir(small_dataset, tmp_path / "model")
    model_files.record_lineage(model, Dataset.open(small_dataset.data_dir))  # as `interlingua train` exports it
    expected = damage(model, book_lines)
    text = tmp_path / "fr.txt"
    text.write_text("".join(line + "\n" for line in book_lines({"fr": "l"}, [57])["fr"]))  # Philemon
    for out in (tmp_path / "blocks", tmp_path / "e.npy"):  # the Ray Data job, and the in-process form
        assert main(["embed", "--model", str(model), "-l", "fr", "-i", str(text), "-o", str(out), *where]) == 2
        line = one_line(capsys.readouterr().err)
        assert line.startswith("interlingua embed: error: ") and expected in line, line
        assert not out.exists()


def test_reencoding_the_text_with_the_datasets_own_tokenizer_gives_its_token_ids(small_dataset, tmp_path):
    """What the champion's re-evaluation relies on: the stored text, encoded with a tokenizer, is the token ids
    `prepare` writes with it."""
    model = untrained_model_dir(small_dataset, tmp_path / "model")
    table = pq.read_table(Path(small_dataset.data_dir) / "test" / "part-00000-of-00001.parquet").slice(0, 20)
    batch = {column: table[column].to_numpy(zero_copy_only=False) for column in table.column_names}
    embedder = SentenceEmbedder.load(model)  # what TextEmbedFn reads the text with
    for lang in ("zh", "ar"):
        stored = [list(ids) for ids in table[f"{lang}_ids"].to_pylist()]
        assert [list(ids) for ids in embedder.token_ids(list(batch[f"{lang}_text"]), lang)] == stored


def test_evaluate_refuses_a_model_of_languages_the_dataset_lacks(small_dataset, tmp_path, where, capsys):
    from model.model_file import save_model
    from model.nmt import MultilingualNMT

    model = untrained_model_dir(small_dataset, tmp_path / "model")
    vocab = load_manifest(small_dataset.data_dir).dump()["spm"]["vocab_size"]
    save_model(
        MultilingualNMT(
            languages=["en", "fr", "de"],
            vocab_size=vocab,
            embed_dim=16,
            encoder_hidden=16,
            decoder_hidden=16,
            shared_encoder=True,
        ),
        str(model / "model.safetensors"),
        step=0,
    )
    assert main(["evaluate", "--model", str(model), *where]) == 2
    line = one_line(capsys.readouterr().err)
    assert "lacks ['de']" in line and "evaluate.languages" in line


@pytest.fixture
def copied(small_dataset, tmp_path):
    """The prepared dataset copied, to damage; overrides that point a run at it."""
    data = tmp_path / "data"
    shutil.copytree(small_dataset.data_dir, data)
    return data, [
        f"run_dir={tmp_path / 'run'}",
        f"dataset_dir={data}",
        f"tracking.uri=sqlite:///{tmp_path}/m.db",
        "prepare.spm.vocab_size=2000",
        "model.embed_dim=16",
        "model.encoder_hidden=16",
        "model.decoder_hidden=16",
    ]


def test_a_shard_replaced_by_another_is_named_before_evaluating(small_dataset, copied, tmp_path, capsys):
    data, where = copied
    model = untrained_model_dir(small_dataset, tmp_path / "model")
    manifest = json.loads((data / "manifest.json").read_text())
    dev, test = (data / manifest["splits"][s]["files"][0]["path"] for s in ("dev", "test"))
    shutil.copy(dev, test)  # the dev split copied over the test split
    assert main(["evaluate", "--model", str(model), *where]) == 2
    line = one_line(capsys.readouterr().err)
    assert f"{test}: sha256" in line and "prepare --force" in line


@pytest.mark.parametrize("damage", ["truncate a training shard", "delete spm.model"])
def test_train_names_a_damaged_input_on_the_driver_before_ray_starts(copied, damage, capsys, monkeypatch):
    asked = []  # `ensure_ray`, the one way a command starts or joins Ray (the run's shared one may be up)
    monkeypatch.setattr("orchestration.train.driver.ensure_ray", lambda *args, **kwargs: asked.append(args))
    data, where = copied
    if damage == "delete spm.model":
        victim = data / "spm.model"
        victim.unlink()
        expected = f"{victim}: missing"
    else:
        victim = data / load_manifest(data).dump()["splits"]["train"]["files"][1]["path"]
        victim.write_bytes(victim.read_bytes()[:500])
        expected = f"{victim}: sha256"
    assert main(["train", *where]) == 2
    assert expected in one_line(capsys.readouterr().err)
    assert asked == []  # no worker ever saw it, so nothing was retried


def test_an_old_model_dir_without_lineage_is_checked_by_its_bundled_tokenizer(small_dataset, tmp_path):
    model = untrained_model_dir(small_dataset, tmp_path / "model")
    manifest = load_manifest(small_dataset.data_dir)
    model_files.check_tokenizer(model, Dataset.open(small_dataset.data_dir))  # its own tokenizer: accepted
    assert not (model / model_files.LINEAGE_FILE).exists()
    assert model_files.verify(model)["spm_sha256"] == manifest.spm.sha256


def exported_model_dir(small_dataset, folder, monkeypatch):
    """A model directory as `interlingua train` exports one (`checkpoint.report`, then `checkpoint.export`), of
    an untrained model over the dataset's sentencepiece model; no lineage.json."""
    import ray.train
    import torch

    from model.nmt import MultilingualNMT
    from orchestration.train import checkpoint

    manifest = load_manifest(small_dataset.data_dir)
    torch.manual_seed(0)
    model = MultilingualNMT(
        languages=manifest.languages,
        vocab_size=manifest.spm.vocab_size,
        embed_dim=16,
        encoder_hidden=16,
        decoder_hidden=16,
        shared_encoder=True,
    )
    state = checkpoint.TrainingState(
        model.state_dict(), {}, None, checkpoint.TrainingProgress(step=10, best_step=10), model.state_dict()
    )
    monkeypatch.setattr(
        ray.train,
        "report",
        lambda metrics, checkpoint=None, **_: shutil.move(checkpoint.path, folder.with_name("checkpoint")),
    )  # uploaded, the local copy gone, as Ray does
    checkpoint.report(
        0,
        state,
        model.args,
        spm_model=str(Path(small_dataset.data_dir) / "spm.model"),
        config=small_dataset.to_dict(),
        metrics={},
    )
    checkpoint.export(ray.train.Checkpoint.from_directory(str(folder.with_name("checkpoint"))), folder)
    return folder


def test_a_model_records_its_tokenizer_and_a_replaced_spm_model_is_refused_naming_both(
    small_dataset, tmp_path, book_lines, where, monkeypatch, capsys, caplog
):
    from model.model_file import load_model

    model = exported_model_dir(small_dataset, tmp_path / "model", monkeypatch)
    trained_with = load_manifest(small_dataset.data_dir).dump()["spm"]["sha256"]
    assert load_model(str(model / model_files.MODEL_FILE))[1].spm_sha256 == trained_with
    assert not (model / model_files.LINEAGE_FILE).exists()
    text = tmp_path / "en.txt"
    text.write_text("In the beginning God created the heaven and the earth.\n")
    embed = ["embed", "--model", str(model), "-l", "en", "-i", str(text), "-o", str(tmp_path / "e.npy"), *where]
    with caplog.at_level("WARNING"):
        assert main(embed) == 0
    assert "cannot check" not in caplog.text  # its own tokenizer, recorded: nothing to warn about

    replaced = model_files.file_sha256(other_tokenizer(book_lines, model / model_files.SPM_FILE))
    for command in ([*embed, "--force"], ["evaluate", "--model", str(model), *where]):
        assert main(command) == 2
        line = one_line(capsys.readouterr().err)
        assert str(model / model_files.SPM_FILE) in line and replaced[:12] in line and trained_with[:12] in line
    assert not (tmp_path / "run" / "eval").exists()  # refused before any work


def test_an_old_model_dir_with_no_tokenizer_record_loads_with_a_warning(small_dataset, tmp_path, book_lines, caplog):
    model = untrained_model_dir(small_dataset, tmp_path / "model")  # saved without the tokenizer's sha256
    other_tokenizer(book_lines, model / model_files.SPM_FILE)  # replaced: nothing can tell
    with caplog.at_level("WARNING"):
        embedder = SentenceEmbedder.load(model)  # an old checkpoint still loads
    assert embedder.embed(["Dieu est amour."], "fr").shape == (1, 32)
    assert f"{model}: neither lineage.json nor the tokenizer's sha256 in model.safetensors" in caplog.text
    assert "cannot check" in caplog.text
    caplog.clear()
    model_files.record_lineage(model, Dataset.open(small_dataset.data_dir))  # lineage.json records it
    with caplog.at_level("WARNING"):
        SentenceEmbedder.load(model)
    assert "cannot check" not in caplog.text


def test_an_older_model_directory_is_refused_until_upgrade_model_converts_it(small_dataset, tmp_path, verse, capsys):
    """A model directory of an older version holds model.pt (a torch pickle): every reader refuses it, naming
    `interlingua upgrade-model`, which converts it once (tensors and plain values only, checked against its
    lineage) into a directory that embeds exactly as before; a model.pt holding code is never converted."""
    import torch

    model = untrained_model_dir(small_dataset, tmp_path / "model")
    model_files.record_lineage(model, Dataset.open(small_dataset.data_dir))
    sentence = verse("l", 8, 1, 1)
    expected = SentenceEmbedder.load(model).embed([sentence], "fr")
    # the same model as an older version saved it
    loaded, meta = model_files.load(model / model_files.MODEL_FILE)
    (model / model_files.MODEL_FILE).unlink()
    torch.save(
        {"args": loaded.args.model_dump(), "state_dict": loaded.state_dict(), "meta": meta.model_dump()},
        model / "model.pt",
    )
    lineage = json.loads((model / "lineage.json").read_text())
    lineage["model_sha256"] = model_files.file_sha256(model / "model.pt")
    (model / "lineage.json").write_text(json.dumps(lineage))
    with pytest.raises(model_files.ModelDirError, match="interlingua upgrade-model"):
        SentenceEmbedder.load(model)

    assert main(["upgrade-model", str(model)]) == 0
    assert "wrote model.safetensors" in capsys.readouterr().out
    assert (model / "model.pt").is_file()  # kept: an older version may still need it
    assert model_files.verify(model)["model_sha256"] == model_files.file_sha256(model / model_files.MODEL_FILE)
    assert (SentenceEmbedder.load(model).embed([sentence], "fr") == expected).all()
    assert main(["upgrade-model", str(model)]) == 2  # once: nothing left to convert
    assert "of this version already" in one_line(capsys.readouterr().err)

    class Payload:
        def __reduce__(self):
            return print, ("ran",)

    hostile = tmp_path / "hostile"
    shutil.copytree(model, hostile)
    (hostile / model_files.MODEL_FILE).unlink()
    (hostile / "lineage.json").unlink()
    torch.save(
        {"args": loaded.args.model_dump(), "state_dict": loaded.state_dict(), "meta": {"x": Payload()}},
        hostile / "model.pt",
    )
    assert main(["upgrade-model", str(hostile)]) == 2
    assert "refused (UnpicklingError" in one_line(capsys.readouterr().err)
    assert not (hostile / model_files.MODEL_FILE).exists()


def test_the_normalization_is_read_from_the_model_directory_alone(tmp_path):
    """A served model reads `prepare.normalize` of its config.yaml and nothing else: a run config that today's
    schema would refuse elsewhere (a key since removed) still serves; a damaged section is named."""
    from core.normalize import NormalizeConfig

    (tmp_path / model_files.CONFIG_FILE).write_text(
        "name: old\ntrain:\n  a_key_since_removed: 3\nprepare:\n  normalize:\n    lowercase: false\n"
    )
    assert model_files.normalization(tmp_path) == NormalizeConfig(lowercase=False)
    (tmp_path / model_files.CONFIG_FILE).write_text("name: old\n")  # none recorded: the defaults it trained with
    assert model_files.normalization(tmp_path) == NormalizeConfig()
    (tmp_path / model_files.CONFIG_FILE).write_text("prepare:\n  normalize:\n    lowercase: sometimes\n")
    with pytest.raises(model_files.ModelDirError, match="config.yaml: prepare.normalize is not a normalization"):
        model_files.normalization(tmp_path)
