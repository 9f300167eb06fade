"""`interlingua embed` at corpus scale on real Bible text: a Ray Data job over a glob of text files and
a Parquet file, blocks + manifest that add up, resumable block by block; bad input named and refused."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.dataset import file_sha256
from evaluation.store import StoredEmbeddings
from orchestration.embed.corpus import embed_corpus
from orchestration.embedding.inputs import CorpusError, plan_blocks, read_block, resolve_inputs
from tests.support.runs import untrained_model_dir


@pytest.fixture(scope="module")
def model_dir(small_dataset, tmp_path_factory):
    return untrained_model_dir(small_dataset, tmp_path_factory.mktemp("embed") / "model")


@pytest.fixture
def corpus(tmp_path, book_lines):
    """Ruth, Obadiah and Jonah (85, 21, 48 verses) in French as two text files (LF with 2 empty lines; CRLF without a
    final newline) and a Parquet file (a null value), and every sentence in order."""
    fr = book_lines({"fr": "l"}, [8, 31, 32])["fr"]
    ruth, obadiah, jonah = fr[:85], fr[85:106], fr[106:]
    ruth = ruth[:10] + [""] + ruth[10:40] + [""] + ruth[40:]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_bytes("".join(s + "\n" for s in ruth).encode())
    (tmp_path / "in" / "b.txt").write_bytes("\r\n".join(obadiah).encode())
    pq.write_table(
        pa.table({"id": range(len(jonah)), "verse": jonah[:5] + [None] + jonah[6:]}),
        tmp_path / "jonah.parquet",
        row_group_size=16,
    )
    sentences = ruth + obadiah + jonah[:5] + [""] + jonah[6:]
    return [str(tmp_path / "in" / "*.txt"), str(tmp_path / "jonah.parquet")], sentences


def test_embed_a_glob_resumes_block_by_block_and_the_manifest_adds_up(model_dir, corpus, tmp_path, local_ray):
    from orchestration.embedding.embedder import SentenceEmbedder

    inputs, sentences = corpus
    out = tmp_path / "out"
    options = dict(lang="fr", model_dir=model_dir, config={"name": "test"}, column="verse", block_rows=32, actors=2)
    first = embed_corpus(inputs, out, **options)
    manifest = json.loads((out / "manifest.json").read_text())
    meta = manifest["meta"]
    assert manifest["format"] == "interlingua-stored-embeddings/3" and manifest["languages"] == ["fr"]
    assert first.rows == manifest["rows"] == len(sentences) == 156 and first.empty == meta["empty"] == 3
    assert [i["rows"] for i in meta["inputs"]] == [87, 21, 48]
    assert [i["empty"] for i in meta["inputs"]] == [2, 0, 1]
    assert all(i["bytes"] == (tmp_path / i["path"]).stat().st_size for i in meta["inputs"])
    assert [(b["source"].rsplit("/", 1)[1], b["first_line"], b["rows"]) for b in meta["sources"]] == [
        ("a.txt", 1, 32),
        ("a.txt", 33, 32),
        ("a.txt", 65, 23),
        ("b.txt", 1, 21),
        ("jonah.parquet", 1, 32),
        ("jonah.parquet", 33, 16),
    ]
    assert [(b["start"], b["rows"]) for b in manifest["blocks"]] == [
        (0, 32),
        (32, 32),
        (64, 23),
        (87, 21),
        (108, 32),
        (140, 16),
    ]
    assert sum(b["rows"] for b in manifest["blocks"]) == manifest["rows"]
    assert sum(b["empty"] for b in meta["sources"]) == meta["empty"]
    assert all(file_sha256(out / "fr" / f"{b['name']}.npy") == b["sha256"]["fr"] for b in manifest["blocks"])
    for block in manifest["blocks"]:  # each block's record: the completion marker, with its checksum
        record = json.loads((out / f"{block['name']}.json").read_text())
        assert record["sha256"] == block["sha256"] and record["fingerprint"] == meta["fingerprint"]
        assert record["job_fingerprint"] == meta["job_fingerprint"] and len(record["input_sha256"]) == 64
    assert meta["model"]["model_sha256"] == file_sha256(model_dir / "model.safetensors")
    assert meta["config"] == {"name": "test"}
    vectors = np.concatenate([np.load(out / "fr" / f"{b['name']}.npy") for b in manifest["blocks"]])
    expected = SentenceEmbedder.load(model_dir).embed(sentences, "fr")  # the same normalization and BPE
    np.testing.assert_allclose(vectors, expected, rtol=1e-5, atol=1e-6)
    store = StoredEmbeddings.open(out)  # the one reader of stored embeddings
    np.testing.assert_array_equal(store.rows("fr"), vectors)
    np.testing.assert_array_equal(store.rows("fr", 30, 90), vectors[30:90])  # across three blocks

    # a killed run: one block missing, another half-written; the rerun embeds only the missing one
    (out / "fr" / "part-00002.npy").unlink()
    (out / "part-00002.json").unlink()
    kept = {p.name: p.stat().st_mtime_ns for p in out.glob("fr/part-*.npy")}
    (out / "fr" / "part-00004.npy.tmp-0a1b2c3d").write_bytes(b"half")
    again = embed_corpus(inputs, out, **options)
    assert again.computed == 1 and again.blocks == 6
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("fr/part-*.npy") if p.name != "part-00002.npy"} == kept
    assert not list(out.rglob("*.tmp*"))
    assert json.loads((out / "manifest.json").read_text()) == manifest  # identical, sha256 included
    assert embed_corpus(inputs, out, **options).computed == 0

    # other inputs in the same folder: refused, replaced with force
    with pytest.raises(CorpusError, match="--force"):
        embed_corpus(inputs[:1], out, **options)
    forced = embed_corpus(inputs[:1], out, **options, force=True)
    assert forced.rows == 108
    assert sorted(p.name for p in out.glob("fr/part-*.npy")) == [f"part-0000{i}.npy" for i in range(4)]
    assert sorted(p.name for p in out.glob("part-*.json")) == [f"part-0000{i}.json" for i in range(4)]


def test_inputs_are_resolved_and_planned_in_order(corpus, tmp_path):
    inputs, sentences = corpus
    paths = resolve_inputs([str(tmp_path / "in"), *inputs])  # the folder, then its glob again: each file once
    assert [p.rsplit("/", 1)[1] for p in paths] == ["a.txt", "b.txt", "jonah.parquet"]
    files, blocks = plan_blocks(paths, column="verse", block_rows=50)
    assert [f.rows for f in files] == [87, 21, 48]
    assert [s for b in blocks for s in read_block(b, column="verse")] == sentences


def test_bad_input_is_named(tmp_path, model_dir, capsys, small_dataset, verse):
    from orchestration.cli import main

    bad = tmp_path / "bad.txt"
    bad.write_bytes(verse("l", 8, 1, 1).encode() + b"\n\ncaf\xe9 au lait\n")
    with pytest.raises(CorpusError, match=r"bad.txt:3: not valid UTF-8"):
        plan_blocks([bad], column="text", block_rows=10)
    args = ["embed", f"dataset_dir={small_dataset.data_dir}", "-l", "fr", "--model", str(model_dir), "-o"]
    assert main([*args, str(tmp_path / "out"), "-i", str(bad)]) == 2
    assert "bad.txt:3: not valid UTF-8" in capsys.readouterr().err
    assert main([*args, str(tmp_path / "out.npy"), "-i", str(bad)]) == 2  # the in-process form too
    assert "bad.txt:3: not valid UTF-8" in capsys.readouterr().err
    assert main([*args, str(tmp_path / "out"), "-i", str(tmp_path / "none*.txt")]) == 2
    assert "matches no file" in capsys.readouterr().err
    pq.write_table(pa.table({"n": [1, 2]}), tmp_path / "n.parquet")
    with pytest.raises(CorpusError, match="no column 'verse'"):
        plan_blocks([tmp_path / "n.parquet"], column="verse", block_rows=10)
    with pytest.raises(CorpusError, match="column 'n' is int64, not text"):
        plan_blocks([tmp_path / "n.parquet"], column="n", block_rows=10)
    with pytest.raises(CorpusError, match="the model knows"):
        embed_corpus([str(bad)], tmp_path / "out", lang="de", model_dir=model_dir, config={})
    assert not (tmp_path / "out").exists()  # nothing written, no Ray started for bad input


def test_the_backend_asked_for_is_the_one_that_runs_and_is_recorded(model_dir, corpus, tmp_path, local_ray):
    """With an int8 export beside the model, `runtime.backend=torch` embeds with torch (the actors used to load
    the export on their own), the manifest names the engine, and another engine's blocks are not this one's."""
    import shutil

    from orchestration.cli import main
    from orchestration.embedding.embedder import SentenceEmbedder

    inputs, sentences = corpus
    model = shutil.copytree(model_dir, tmp_path / "model")
    assert main(["export", "--model", str(model)]) == 0  # fp32 and int8 beside the model
    options = dict(lang="fr", model_dir=model, config={}, column="verse", block_rows=64)
    torch_run = embed_corpus(inputs, tmp_path / "torch", backend="torch", **options)
    manifest = json.loads((torch_run.out_dir / "manifest.json").read_text())
    assert manifest["meta"]["job"]["backend"] == "torch"
    expected = SentenceEmbedder.load(model, backend="torch").embed(sentences, "fr")
    np.testing.assert_allclose(StoredEmbeddings.open(torch_run.out_dir).rows("fr"), expected, rtol=1e-5, atol=1e-6)

    int8 = embed_corpus(inputs, tmp_path / "int8", backend="onnx-int8", **options)
    assert json.loads((int8.out_dir / "manifest.json").read_text())["meta"]["job"]["backend"] == "onnx-int8"
    assert not np.allclose(StoredEmbeddings.open(int8.out_dir).rows("fr"), expected, atol=1e-6)
    with pytest.raises(CorpusError, match="other inputs, model or options"):  # never resumed as torch's
        embed_corpus(inputs, tmp_path / "int8", backend="torch", **options)


def test_an_input_rewritten_after_planning_is_refused_and_a_rerun_embeds_only_its_changed_blocks(
    model_dir, tmp_path, book_lines, small_dataset, local_ray, monkeypatch, capsys
):
    """Issue 71: an input rewritten between the plan and the actors' reads (the same size, other lines) is
    refused, one line naming the file and the block; the rerun embeds every block of the lines it finds, and
    after a later rewrite embeds again only the block whose lines changed."""
    import orchestration.embed.corpus as corpus
    from orchestration.cli import main
    from orchestration.embedding.embedder import SentenceEmbedder
    from tests.support.corpus import error_line, write_lines

    ruth = book_lines({"fr": "l"}, [8])["fr"]  # 85 verses: blocks of lines 1-32, 33-64, 65-85
    path, out = write_lines(tmp_path / "ruth.fr", ruth), tmp_path / "out"

    def swap(lines: list[str], i: int) -> list[str]:  # the same bytes: the same size, other lines
        lines = list(lines)
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
        write_lines(path, lines)
        return lines

    real, now = corpus.embed_blocks, ruth

    def rewritten_first(*args, **kwargs):  # after the plan, before any actor reads its block
        nonlocal now
        now = swap(ruth, 40)  # lines 41 and 42: block part-00001
        return real(*args, **kwargs)

    monkeypatch.setattr(corpus, "embed_blocks", rewritten_first)
    args = ["embed", f"dataset_dir={small_dataset.data_dir}", "-l", "fr", "--model", str(model_dir)]
    assert main([*args, "-i", str(path), "-o", str(out), "--block-rows", "32"]) == 2
    line = error_line(capsys)
    assert f"{path}: lines 33-64 (block part-00001) changed after it was planned; run again" in line, line
    assert not (out / "manifest.json").exists() and not (out / "part-00001.json").exists()
    monkeypatch.setattr(corpus, "embed_blocks", real)

    options = dict(lang="fr", model_dir=model_dir, config={}, block_rows=32)
    first = embed_corpus([str(path)], out, **options)  # run again: the blocks of the lines there now
    embedder = SentenceEmbedder.load(model_dir)
    stored = StoredEmbeddings.open(out).rows("fr")
    np.testing.assert_allclose(stored, embedder.embed(now, "fr"), rtol=1e-5, atol=1e-6)
    assert first.computed >= 1 and first.blocks == 3

    kept = {p.name: p.stat().st_mtime_ns for p in out.glob("fr/part-*.npy")}
    now = swap(now, 70)  # lines 71 and 72: block part-00002 alone
    again = embed_corpus([str(path)], out, **options)  # no --force: the same input, rewritten
    assert again.computed == 1
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("fr/part-*.npy")} != kept
    assert {n: t for n, t in kept.items() if n != "part-00002.npy"} == {
        p.name: p.stat().st_mtime_ns for p in out.glob("fr/part-*.npy") if p.name != "part-00002.npy"
    }
    np.testing.assert_allclose(StoredEmbeddings.open(out).rows("fr"), embedder.embed(now, "fr"), rtol=1e-5, atol=1e-6)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["meta"]["inputs"][0]["sha256"] == file_sha256(path)
    assert embed_corpus([str(path)], out, **options).computed == 0
