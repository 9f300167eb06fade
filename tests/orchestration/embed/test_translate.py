"""`interlingua translate` on real Bible text through an (untrained) model directory: the mechanics, not the
quality. One line out per line in; `--from-embeddings` of `embed -o FILE.npy`'s vectors decodes to the same text
as translating the sentences (the round trip through a stored vector); every bad input is one line and exit 2,
naming the file, line or flag, and nothing is written."""

from __future__ import annotations

import numpy as np
import pytest

from orchestration.cli import main
from tests.support.corpus import error_line, write_lines
from tests.support.runs import untrained_model_dir


@pytest.fixture(scope="module")
def model_dir(small_dataset, tmp_path_factory):
    return untrained_model_dir(small_dataset, tmp_path_factory.mktemp("translate") / "model")


@pytest.fixture
def ruth(tmp_path, book_lines):
    """The first 12 verses of Ruth in English."""
    return write_lines(tmp_path / "ruth.en.txt", book_lines({"en": "k"}, [8])["en"][:12])


def test_translate_writes_one_line_per_line_and_stored_vectors_decode_to_the_same_text(
    model_dir, ruth, tmp_path, capsys
):
    out, beam = tmp_path / "ruth.fr.txt", tmp_path / "ruth.fr.beam.txt"
    model = ["--model", str(model_dir)]
    assert main(["translate", *model, "-l", "en", "-t", "fr", "-i", str(ruth), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"12 sentences (en) -> {out} (fr)"
    lines = out.read_text(encoding="utf-8").split("\n")
    assert len(lines) == 13 and lines[-1] == ""  # 12 lines, each ended
    assert main(["translate", *model, "-l", "en", "-t", "fr", "-i", str(ruth), "-o", str(beam), "--beam", "3"]) == 0
    assert len(beam.read_text(encoding="utf-8").split("\n")) == 13

    vectors = tmp_path / "ruth.npy"
    assert main(["embed", *model, "-l", "en", "-i", str(ruth), "-o", str(vectors)]) == 0
    again = tmp_path / "again.fr.txt"
    assert main(["translate", *model, "-t", "fr", "--from-embeddings", "-i", str(vectors), "-o", str(again)]) == 0
    # the vectors carry no source length: decoded from them, a sentence may go on where the direct translation
    # stopped at its source's limit (twice its tokens and 10), never elsewhere
    assert np.load(vectors).shape == (12, 32)
    decoded = again.read_text(encoding="utf-8").split("\n")
    assert len(decoded) == 13
    assert all(b.startswith(a) for a, b in zip(lines, decoded)), list(zip(lines, decoded))


def _refused(capsys, argv: list[str], *expected: str) -> None:
    assert main(["translate", *argv]) == 2
    line = error_line(capsys)
    assert line.startswith("interlingua translate: error: "), line
    for part in expected:
        assert part in line, (part, line)


def test_bad_input_is_one_line_and_exit_2_and_nothing_is_written(model_dir, small_dataset, ruth, tmp_path, capsys):
    model, out = ["--model", str(model_dir)], tmp_path / "out.txt"
    base = [*model, "-l", "en", "-t", "fr", "-o", str(out)]
    empty = write_lines(tmp_path / "empty.txt", ["In the beginning.", "", "And the earth."])
    _refused(capsys, [*base, "-i", str(empty)], f"{empty}:2: an empty line")
    long = write_lines(tmp_path / "long.txt", ["A short one.", "word " * 2000])
    _refused(capsys, [*base, "-i", str(long)], f"{long}:2: a line of more than")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\n\xff\xfe broken\n")
    _refused(capsys, [*base, "-i", str(bad)], f"{bad}:2")
    _refused(capsys, [*model, "-l", "en", "-t", "de", "-i", str(ruth), "-o", str(out)], "-t de", "no decoder for 'de'")
    _refused(capsys, [*model, "-l", "xx", "-t", "fr", "-i", str(ruth), "-o", str(out)], "-l xx")
    _refused(capsys, [*model, "-t", "fr", "-i", str(ruth), "-o", str(out)], "give -l LANG")
    _refused(capsys, [*base, "-i", str(ruth), "--beam", "0"], "--beam 0")
    _refused(capsys, [*base, "-i", str(tmp_path / "missing.txt")], "missing.txt: no such file")
    _refused(capsys, [*model, "-l", "en", "-t", "fr", "-i", str(ruth), "-o", str(ruth)], "also an input")
    assert not out.exists()

    users = write_lines(tmp_path / "users.txt", ["a user's file"])
    _refused(capsys, [*model, "-l", "en", "-t", "fr", "-i", str(ruth), "-o", str(users)], "exists")
    assert users.read_text() == "a user's file\n"

    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.ones((3, 7), dtype=np.float32))
    _refused(capsys, [*model, "-t", "fr", "--from-embeddings", "-i", str(wrong), "-o", str(out)], "dimension")
    nan = tmp_path / "nan.npy"
    vectors = np.zeros((3, 32), dtype=np.float32)
    vectors[1, 0] = np.nan
    np.save(nan, vectors)
    _refused(capsys, [*model, "-t", "fr", "--from-embeddings", "-i", str(nan), "-o", str(out)], "row 1")
    pickled = tmp_path / "objects.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    _refused(
        capsys, [*model, "-t", "fr", "--from-embeddings", "-i", str(pickled), "-o", str(out)], "not an (N, D) array"
    )
    assert not out.exists()


def test_a_model_whose_decoders_were_never_trained_says_so(small_dataset, ruth, tmp_path, capsys):
    ranked = untrained_model_dir(small_dataset, tmp_path / "ranked", decoders=[])
    _refused(
        capsys,
        ["--model", str(ranked), "-l", "en", "-t", "fr", "-i", str(ruth), "-o", str(tmp_path / "o.txt")],
        "-t fr",
        "was never trained",
        "taught no decoder",
    )
    some = untrained_model_dir(small_dataset, tmp_path / "some", decoders=["en"])
    _refused(
        capsys,
        ["--model", str(some), "-l", "en", "-t", "fr", "-i", str(ruth), "-o", str(tmp_path / "o.txt")],
        "decoders for en only",
    )


def test_a_file_put_at_the_output_while_the_lines_are_translated_is_never_replaced(
    model_dir, ruth, tmp_path, capsys, monkeypatch
):
    from orchestration.embedding.translator import SentenceTranslator

    out, translate = tmp_path / "late.txt", SentenceTranslator.translate

    def meanwhile(self, *args, **kwargs):
        out.write_text("a user's file, made while interlingua translated\n")
        return translate(self, *args, **kwargs)

    monkeypatch.setattr(SentenceTranslator, "translate", meanwhile)
    _refused(capsys, ["--model", str(model_dir), "-l", "en", "-t", "fr", "-i", str(ruth), "-o", str(out)], "exists")
    assert out.read_text() == "a user's file, made while interlingua translated\n"
