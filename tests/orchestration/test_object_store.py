"""Every stage with its run dir in an object store (a real S3 server, moto's): what each writes lands in
the bucket, nothing is written to a local folder named after the URI, and a rerun finds its work done.
Prepare, train and evaluate with the run dir in a bucket are asserted so by the bucket variant of
test_output_trees.py, which runs every command there."""

import io

import numpy as np
import pytest

from core import connection, ownership, storage, transfer
from core.errors import Exit
from orchestration.cli import main
from tests.support.corpus import SMALL_BOOKS

pytestmark = [
    pytest.mark.beam,
    pytest.mark.ray,
    pytest.mark.usefixtures("local_ray"),
]  # one Ray for the module's commands


def test_prepare_reads_line_aligned_files_from_the_bucket(s3_bucket, tmp_path, monkeypatch, book_lines):
    monkeypatch.chdir(tmp_path)
    lines = book_lines({"en": "k", "fr": "l"}, SMALL_BOOKS[:3])
    for lang, texts in lines.items():
        storage.write_bytes(f"{s3_bucket}/corpus/bible.{lang}", ("\n".join(texts) + "\n").encode("utf-8"))
    data = f"{s3_bucket}/prepared"
    args = [
        f"dataset_dir={data}",
        f"run_dir={s3_bucket}/runs/y",
        f"prepare.sources=[{{kind: text, path: '{s3_bucket}/corpus/bible.{{lang}}', languages: [en, fr]}}]",
        "prepare.split.dev_size=20",
        "prepare.split.test_size=20",
        "prepare.spm.vocab_size=1000",
    ]
    assert main(["prepare", *args]) == Exit.OK
    manifest = storage.read_json(f"{data}/manifest.json")
    read = {entry["path"]: entry["sha256"] for entry in manifest["inputs"]}  # the bytes it read, from the bucket
    assert read[f"{s3_bucket}/corpus/bible.fr"] == storage.sha256(f"{s3_bucket}/corpus/bible.fr")
    assert 0 < sum(manifest["splits"][s]["tuples"] for s in ("train", "dev", "test")) <= len(lines["en"])
    assert list(tmp_path.iterdir()) == []
    assert (
        main(
            [
                "prepare",
                *args,
                f"prepare.sources=[{{kind: text, path: '{s3_bucket}/corpus/none.{{lang}}', languages: [en, fr]}}]",
            ]
        )
        == Exit.USER_ERROR
    )


def _lines_bytes(lines: list[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8")


@pytest.fixture
def bucket_model(s3_bucket, small_dataset, tmp_path_factory):
    """An untrained model directory, local and uploaded to the bucket: (local Path, its URI)."""
    from tests.support.runs import untrained_model_dir

    local = untrained_model_dir(small_dataset, tmp_path_factory.mktemp("store-model") / "model")
    transfer.upload_dir(local, f"{s3_bucket}/models/m")
    return local, f"{s3_bucket}/models/m"


def test_embed_reads_and_writes_the_bucket_and_a_rerun_resumes(
    s3_bucket, bucket_model, small_dataset, tmp_path, monkeypatch, book_lines, capsys
):
    from evaluation.store import StoredEmbeddings
    from orchestration.embedding.embedder import SentenceEmbedder

    monkeypatch.chdir(tmp_path)
    local_model, model = bucket_model
    fr = book_lines({"fr": "l"}, [8, 31])["fr"]  # Ruth (85 verses), Obadiah (21)
    storage.write_bytes(f"{s3_bucket}/corpus/ruth.txt", _lines_bytes(fr[:85]))
    storage.write_bytes(f"{s3_bucket}/corpus/obadiah.txt", _lines_bytes(fr[85:]))
    out = f"{s3_bucket}/emb"
    args = [
        "embed",
        f"dataset_dir={small_dataset.data_dir}",
        "-l",
        "fr",
        "--model",
        model,
        "--block-rows",
        "32",
        "-i",
        f"{s3_bucket}/corpus/*.txt",
        "-o",
        out,
    ]
    assert main(args) == Exit.OK
    assert "106 sentences (0 empty)" in capsys.readouterr().out
    manifest = storage.read_json(f"{out}/manifest.json")
    # the glob's matches in name order, read from the bucket: Obadiah, then Ruth
    assert [i["path"] for i in manifest["meta"]["inputs"]] == [
        f"{s3_bucket}/corpus/{n}.txt" for n in ("obadiah", "ruth")
    ]
    assert manifest["meta"]["model"]["dir"] == model
    blocks = [f"{x}part-0000{i}.{e}" for i in range(4) for x, e in (("", "json"), ("fr/", "npy"))]
    assert sorted(storage.files(out)) == sorted(["manifest.json", *blocks])
    assert all(storage.sha256(f"{out}/fr/{b['name']}.npy") == b["sha256"]["fr"] for b in manifest["blocks"])
    expected = SentenceEmbedder.load(local_model).embed(fr[85:] + fr[:85], "fr")
    stored = StoredEmbeddings.open(out)  # read from the bucket, block by block
    assert stored.folder == out and stored.starts == (0, 21, 53, 85, 106)
    np.testing.assert_allclose(stored.rows("fr"), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stored.rows("fr", 20, 54), expected[20:54], rtol=1e-5, atol=1e-6)

    # a rerun does nothing; a block lost (with its record) is the only one embedded again
    assert main(args) == Exit.OK and "0 embedded now, 4 complete already" in capsys.readouterr().out
    storage.delete_file(f"{out}/part-00003.json")
    storage.delete_file(f"{out}/fr/part-00003.npy")
    assert main(args) == Exit.OK and "1 embedded now, 3 complete already" in capsys.readouterr().out
    assert storage.read_json(f"{out}/manifest.json") == manifest  # identical, every sha256 included

    # -o FILE.npy in the bucket: written whole, never replaced without --force
    small = [*args[:-4], "-i", f"{s3_bucket}/corpus/obadiah.txt", "-o", f"{s3_bucket}/obadiah.npy"]
    assert main(small) == Exit.OK
    np.testing.assert_allclose(
        np.load(io.BytesIO(storage.read_bytes(f"{s3_bucket}/obadiah.npy"))), expected[:21], rtol=1e-5, atol=1e-6
    )
    assert main(small) == Exit.USER_ERROR and "pass --force" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing written to a local folder named after a URI


def test_embed_refuses_a_foreign_object_in_the_output_prefix_and_bad_schemes(
    s3_bucket, bucket_model, small_dataset, tmp_path, monkeypatch, book_lines, capsys
):
    monkeypatch.chdir(tmp_path)
    _, model = bucket_model
    storage.write_bytes(f"{s3_bucket}/corpus/ruth.txt", _lines_bytes(book_lines({"fr": "l"}, [8])["fr"]))
    sentinel = b"a user's notes: never overwrite me\n"
    storage.write_bytes(f"{s3_bucket}/emb/notes.txt", sentinel)
    args = [
        "embed",
        f"dataset_dir={small_dataset.data_dir}",
        "-l",
        "fr",
        "--model",
        model,
        "-i",
        f"{s3_bucket}/corpus/ruth.txt",
    ]
    assert main([*args, "-o", f"{s3_bucket}/emb", "--force"]) == Exit.USER_ERROR
    err = capsys.readouterr().err
    assert "-o" in err and "notes.txt" in err and "Traceback" not in err
    assert storage.files(f"{s3_bucket}/emb") == ["notes.txt"]  # refused before any block was written
    assert storage.read_bytes(f"{s3_bucket}/emb/notes.txt") == sentinel
    for bad, flag in (("ftp://host/corpus.txt", "-i"), ("s3:/bucket/corpus/ruth.txt", "-i")):
        assert main([*args[:-1], bad, "-o", f"{s3_bucket}/emb2"]) == Exit.USER_ERROR
        assert f"{flag}: {bad}" in capsys.readouterr().err
    assert main([*args, "-o", "gopher://host/emb"]) == Exit.USER_ERROR
    assert "-o: gopher://host/emb: unsupported scheme" in capsys.readouterr().err
    assert not storage.entries(f"{s3_bucket}/emb2") and list(tmp_path.iterdir()) == []


def test_mine_with_inputs_and_output_in_the_bucket_finds_the_pairs_it_finds_locally(
    s3_bucket, bucket_model, tmp_path, monkeypatch, book_lines
):
    import pyarrow.parquet as pq

    from tests.support.corpus import write_lines

    monkeypatch.chdir(tmp_path)
    local_model, model = bucket_model
    true = book_lines({"fr": "l", "en": "k"}, [8, 32])  # Ruth, Jonah; Esther and Lamentations as distractors
    fr = true["fr"] + book_lines({"fr": "l"}, [17])["fr"]
    en = book_lines({"en": "k"}, [25])["en"] + true["en"][::-1]
    gold = [f"{f}\t{e}" for f, e in zip(true["fr"], true["en"])]
    local = tmp_path / "local"
    local.mkdir()
    for name, lines in (("fr.txt", fr), ("en.txt", en), ("gold.tsv", gold)):
        write_lines(local / name, lines)
        storage.write_bytes(f"{s3_bucket}/in/{name}", _lines_bytes(lines))

    def mine_in(where: str, model_dir: str, out: str) -> int:
        return main(
            [
                "mine",
                f"run_dir={local / 'run'}",
                f"tracking.uri=sqlite:///{local / 'mlflow.db'}",
                f"mine.model={model_dir}",
                f"mine.output_dir={out}",
                f"mine.gold={{path: '{where}/gold.tsv'}}",
                f"mine.inputs=[{{lang: fr, path: '{where}/fr.txt'}}, {{lang: en, path: '{where}/en.txt'}}]",
            ]
        )

    assert mine_in(str(local), str(local_model), str(local / "mined")) == Exit.OK
    out = f"{s3_bucket}/mine"
    assert mine_in(f"{s3_bucket}/in", model, out) == Exit.OK
    found = storage.files(out)
    assert {
        "manifest.json",
        "report.png",
        "pairs-fr-en.parquet",
        "embeddings/fr/sentences.parquet",
        "embeddings/en/blocks/manifest.json",
    } <= set(found) and ownership.JOURNAL not in found
    remote = storage.open_parquet(f"{out}/pairs-fr-en.parquet").read()
    assert remote.equals(pq.read_table(local / "mined" / "pairs-fr-en.parquet")) and len(remote) > 0
    manifest = storage.read_json(f"{out}/manifest.json")
    assert manifest["pairs"]["fr-en"]["sha256"] == storage.sha256(f"{out}/pairs-fr-en.parquet")
    assert manifest["model"]["model"] == model
    # a rerun keeps the blocks in the bucket (their records untouched) and finds the same pairs
    record = storage.read_bytes(f"{out}/embeddings/fr/blocks/part-00000.json")
    assert mine_in(f"{s3_bucket}/in", model, out) == Exit.OK
    assert storage.read_bytes(f"{out}/embeddings/fr/blocks/part-00000.json") == record
    assert storage.open_parquet(f"{out}/pairs-fr-en.parquet").read().equals(remote)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local"]


def test_embed_and_mine_name_a_missing_bucket_or_a_silent_store_in_one_line_exit_1(
    s3_bucket, tmp_path, monkeypatch, book_lines, capsys
):
    from tests.support.corpus import write_lines

    monkeypatch.chdir(tmp_path)
    fr = write_lines(tmp_path / "fr.txt", book_lines({"fr": "l"}, [57])["fr"])  # Philemon
    embed = ["embed", "-l", "fr", "--model", str(tmp_path / "model"), "-i", str(fr)]
    mine = [
        "mine",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        "mine.threshold=1.1",
        f"mine.inputs=[{{lang: fr, path: '{fr}'}}, {{lang: en, path: 's3://no-such-bucket/en.txt'}}]",
    ]
    assert main([*embed, "-o", "s3://no-such-bucket/emb"]) == Exit.FAILED
    assert capsys.readouterr().err.strip() == (
        "interlingua embed: error: -o: s3://no-such-bucket/emb: bucket 'no-such-bucket' does not exist at "
        f"{storage.os.environ[connection.ENDPOINT_ENV]}; create it first"
    )
    assert main(mine) == Exit.FAILED
    assert "error: mine.inputs (en): s3://no-such-bucket/en.txt: bucket 'no-such-bucket'" in capsys.readouterr().err
    monkeypatch.setenv(connection.ENDPOINT_ENV, "http://127.0.0.1:9")  # nothing listens there
    assert main([*embed, "-o", f"{s3_bucket}/emb"]) == Exit.FAILED
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"interlingua embed: error: -o: {s3_bucket}/emb: the store does not answer")
    assert "\n" not in err
    assert (
        main(
            [
                *mine[:-1],
                f"mine.output_dir={s3_bucket}/mine",
                f"mine.inputs=[{{lang: fr, path: '{fr}'}}, {{lang: en, path: '{fr}'}}]",
            ]
        )
        == Exit.FAILED
    )
    assert "error: mine.output_dir: s3://bucket/mine: the store does not answer" in capsys.readouterr().err
    assert not (tmp_path / "s3:").exists()


def test_inputs_in_the_bucket_by_prefix_and_glob_are_read_as_local_files_are(s3_bucket, tmp_path, book_lines):
    from orchestration.embedding.inputs import CorpusError, plan_blocks, read_block, resolve_inputs
    from tests.support.corpus import write_lines

    fr = book_lines({"fr": "l"}, [8, 31])["fr"]
    ruth, obadiah = fr[:85], fr[85:]
    (tmp_path / "more").mkdir()
    for name, lines in (("ruth.txt", ruth), ("more/obadiah.txt", obadiah), (".hidden", ruth[:2])):
        storage.write_bytes(f"{s3_bucket}/corpus/{name}", _lines_bytes(lines))
        write_lines(tmp_path / name, lines)  # the same files, local
    assert resolve_inputs([f"{s3_bucket}/corpus"]) == [f"{s3_bucket}/corpus/ruth.txt"]  # visible, not below
    assert resolve_inputs([f"{s3_bucket}/corpus/*.txt"]) == [f"{s3_bucket}/corpus/ruth.txt"]
    assert resolve_inputs([f"{s3_bucket}/corpus/*/*.txt"]) == [f"{s3_bucket}/corpus/more/obadiah.txt"]
    found = resolve_inputs([f"{s3_bucket}/corpus/**/*.txt"])
    assert found == [f"{s3_bucket}/corpus/more/obadiah.txt", f"{s3_bucket}/corpus/ruth.txt"]
    files, blocks = plan_blocks(found, column="text", block_rows=30)
    local, _ = plan_blocks(resolve_inputs([str(tmp_path / "**" / "*.txt")]), column="text", block_rows=30)
    assert [(f.rows, f.bytes, f.sha256) for f in files] == [(f.rows, f.bytes, f.sha256) for f in local]
    assert [s for b in blocks for s in read_block(b, column="text")] == obadiah + ruth
    with pytest.raises(CorpusError, match="matches no file"):
        resolve_inputs([f"{s3_bucket}/corpus/*.tsv"])
    with pytest.raises(CorpusError, match="no such file or prefix"):
        resolve_inputs([f"{s3_bucket}/nothing"])


def test_export_takes_a_model_in_the_bucket(s3_bucket, small_dataset, tmp_path, capsys, monkeypatch):
    from orchestration.adapters import model_dir as model_files
    from tests.support.runs import untrained_model_dir

    model = untrained_model_dir(small_dataset, tmp_path / "model")
    monkeypatch.chdir(tmp_path)
    transfer.upload_dir(model, f"{s3_bucket}/models/m")
    local = model_files.fetch(f"{s3_bucket}/models/m")
    assert storage.sha256(local / "model.safetensors") == storage.sha256(model / "model.safetensors")
    assert main(["export", "--model", f"{s3_bucket}/models/m", "-o", str(tmp_path / "onnx")]) == Exit.OK
    assert (tmp_path / "onnx" / "manifest.json").is_file()
    assert main(["export", "--model", f"{s3_bucket}/models/m"]) == Exit.USER_ERROR
    assert "give a local -o" in capsys.readouterr().err


def test_a_model_in_the_bucket_is_found_by_its_lineage_a_replaced_model_is_refused_and_a_planted_copy_replaced(
    s3_bucket, bucket_model, small_dataset, tmp_path, monkeypatch
):
    import shutil

    from core.dataset import Dataset
    from orchestration.adapters import model_dir as model_files
    from tests.support.runs import other_weights, untrained_model_dir

    local, model = bucket_model
    model_files.record_lineage(local, Dataset.open(small_dataset.data_dir))  # as `interlingua train` writes it
    storage.write_bytes(f"{model}/lineage.json", (local / "lineage.json").read_bytes())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "host-a"))  # this user's cache folder, empty
    real = storage.sha256
    monkeypatch.setattr(
        storage,
        "sha256",
        lambda location: pytest.fail(f"{location} hashed at the store") if storage.is_uri(location) else real(location),
    )
    fetched = model_files.fetch(model)  # the key from lineage.json: the model is read once, by the download
    assert fetched.name == model_files.lineage(local)["model_sha256"]
    assert fetched.parent == tmp_path / "host-a" / "interlingua" / "models"
    assert (fetched.parent.parent.stat().st_mode & 0o777) == 0o700  # no other user may plant a copy there
    assert (fetched / "model.safetensors").read_bytes() == (local / "model.safetensors").read_bytes()
    assert model_files.fetch(model) == fetched  # cached: nothing downloaded again

    # a copy planted under the expected name (another model, its own lineage consistent): checked on use,
    # refused, fetched again
    planted = untrained_model_dir(small_dataset, tmp_path / "planted")
    other_weights(planted)
    model_files.record_lineage(planted, Dataset.open(small_dataset.data_dir))
    shutil.rmtree(fetched)
    shutil.copytree(planted, fetched)
    assert model_files.fetch(model) == fetched
    assert (fetched / "model.safetensors").read_bytes() == (local / "model.safetensors").read_bytes()

    storage.write_bytes(
        f"{model}/model.safetensors", (local / "model.safetensors").read_bytes() + b"\0"
    )  # not its lineage's
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "host-b"))
    with pytest.raises(model_files.ModelDirError, match="model.safetensors"):
        model_files.fetch(model)
    assert list((tmp_path / "host-b" / "interlingua" / "models").iterdir()) == []  # no copy left to be found later
