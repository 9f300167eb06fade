"""`interlingua translate -o DIR` on real Bible text through an (untrained) model directory: the Ray Data job's
mechanics, not the quality. Blocks that add up to one line per input line (an empty line stays empty), each the
translation the model makes in this process; a rerun after a kill translates only the blocks missing, damaged or
of a changed input; a user's file in the folder and other translations there are refused, and nothing of the
user's is touched."""

from __future__ import annotations

import json

import pytest

from orchestration.cli import main
from orchestration.embed.translate_corpus import open_translations
from tests.support.corpus import error_line, write_lines
from tests.support.runs import untrained_model_dir


@pytest.fixture(scope="module")
def model_dir(small_dataset, tmp_path_factory):
    return untrained_model_dir(small_dataset, tmp_path_factory.mktemp("translate-corpus") / "model")


def _blocks(lines: list[str], size: int) -> list[list[str]]:
    return [lines[i : i + size] for i in range(0, len(lines), size)]


def test_a_corpus_translates_block_by_block_resumes_and_refuses_what_is_not_its_own(
    model_dir, book_lines, tmp_path, local_ray, capsys
):
    from orchestration.embedding.translator import SentenceTranslator

    en = book_lines({"en": "k"}, [8, 31])["en"]  # Ruth (85 verses) and Obadiah (21)
    ruth, obadiah = en[:85][:20], en[85:]
    ruth = ruth[:5] + [""] + ruth[5:]  # 21 lines, the sixth empty
    (tmp_path / "in").mkdir()
    write_lines(tmp_path / "in" / "a.txt", ruth)
    write_lines(tmp_path / "in" / "b.txt", obadiah)
    out = tmp_path / "out"
    argv = ["translate", "--model", str(model_dir), "-l", "en", "-t", "fr", "-i", str(tmp_path / "in" / "*.txt")]
    argv += ["-o", str(out), "--block-rows", "8"]
    assert main(argv) == 0
    said = capsys.readouterr().out.strip()
    assert said.startswith(f"42 sentences (en, 1 empty) -> {out}/ (fr) in 6 blocks (6 translated now, 0 complete"), said

    manifest, lines = open_translations(out)
    assert (manifest.rows, manifest.empty, manifest.source_lang, manifest.target_lang) == (42, 1, "en", "fr")
    assert [(b.source.rsplit("/", 1)[1], b.first_line, b.rows) for b in manifest.blocks] == [
        ("a.txt", 1, 8),
        ("a.txt", 9, 8),
        ("a.txt", 17, 5),
        ("b.txt", 1, 8),
        ("b.txt", 9, 8),
        ("b.txt", 17, 5),
    ]
    assert len(lines) == 42 and lines[5] == "" and all(lines[i] for i in range(42) if i != 5)
    translator = SentenceTranslator.load(model_dir)  # each block is what the model translates in this process
    expected = []
    for block in [*_blocks(ruth, 8), *_blocks(obadiah, 8)]:
        made = iter(translator.translate([s for s in block if s], "en", "fr"))
        expected += [next(made) if s else "" for s in block]
    assert lines == expected
    records = {b.name: json.loads((out / f"{b.name}.json").read_text()) for b in manifest.blocks}
    assert all(
        r["job_fingerprint"] == manifest.job_fingerprint and len(r["input_sha256"]) == 64 for r in records.values()
    )

    # a killed run: one block gone with its record, another's text damaged, a half-written one left; the manifest
    # not written yet. The rerun translates those two alone and writes the same manifest
    (out / "part-00001.txt").unlink()
    (out / "part-00001.json").unlink()
    (out / "part-00004.txt").write_text("not what the model said\n" * 8)
    (out / "part-00002.txt.tmp-0a1b2c3d").write_bytes(b"half")
    (out / "manifest.json").unlink()
    kept = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*.txt") if p.name != "part-00004.txt"}
    assert main(argv) == 0
    assert "(2 translated now, 4 complete already" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("part-*.txt") if p.name in kept} == kept
    assert not list(out.glob("*.tmp-*"))
    again, relines = open_translations(out)
    assert again == manifest and relines == lines
    assert main(argv) == 0
    assert "(0 translated now, 6 complete already" in capsys.readouterr().out

    # an input rewritten since: only its changed block is translated again
    write_lines(tmp_path / "in" / "b.txt", obadiah[:10] + [obadiah[10].upper()] + obadiah[11:])
    assert main(argv) == 0
    assert "(1 translated now, 5 complete already" in capsys.readouterr().out
    _, changed = open_translations(out)
    assert changed[:29] + changed[37:] == lines[:29] + lines[37:]

    # other translations in the folder: refused, exit 2, one line; replaced with --force
    spanish = [*argv[:6], "es", *argv[7:]]
    assert main(spanish) == 2
    assert "holds translations of other inputs, model, languages or options" in error_line(capsys)
    assert main([*spanish, "--force"]) == 0
    assert "(6 translated now, 0 complete already" in capsys.readouterr().out
    assert open_translations(out)[0].target_lang == "es"
    # a user's file there: refused, with --force too; nothing of theirs touched, nothing of ours either
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    users = out / "notes.txt"
    users.write_text("a user's notes\n")
    for force in ([], ["--force"]):
        assert main([*argv, *force]) == 2
        assert "notes.txt" in error_line(capsys)
    assert users.read_text() == "a user's notes\n"
    assert {p.name: p.read_bytes() for p in out.iterdir() if p != users} == before

    # bad input, before any work: a language without a decoder, vectors or stdin into a folder
    assert main([*argv[:6], "de", *argv[7:-4], "-o", str(tmp_path / "de")]) == 2
    assert "no decoder for 'de'" in error_line(capsys)
    assert (
        main(
            [
                "translate",
                "--model",
                str(model_dir),
                "-t",
                "fr",
                "--from-embeddings",
                "-i",
                "x.npy",
                "-o",
                str(tmp_path / "v"),
            ]
        )
        == 2
    )
    assert "give -o FILE.txt" in error_line(capsys)
    assert not (tmp_path / "de").exists() and not (tmp_path / "v").exists()
    named = write_lines(tmp_path / "ruth.fr", ["a user's file"])  # -o FILE other than FILE.txt: a folder's name
    assert main([*argv[:-4], "-o", str(named)]) == 2
    assert "is a file" in error_line(capsys) and named.read_text() == "a user's file\n"
    assert main([*argv[:-4], "-o", str(tmp_path / "new.txt"), "--force"]) == 2
    assert "only ever a new file" in error_line(capsys)
