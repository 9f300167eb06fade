"""The input reader's bounded lines (issue 71): a line longer than the model's limit (serve.max_sentence_chars) is
read a bounded piece at a time, never whole, cut to the limit and counted, on every path that reads text (embed's
blocks, a text file read whole by mine, test sets and the in-process embed, a Parquet column). On Ruth in French,
with one line of 10 MB in the middle."""

from __future__ import annotations

import hashlib
import logging
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestration.config.stages import ServeConfig
from orchestration.embedding.inputs import CorpusError, plan_blocks, read_block, read_column, read_lines

LIMIT = ServeConfig().max_sentence_chars  # the most characters of a sentence the model is given
HUGE = 10_000_000  # bytes of the long line: 5,000 times the limit


@pytest.fixture
def ruth(book_lines) -> list[str]:
    return book_lines({"fr": "l"}, [8])["fr"]


def with_long_line(path: Path, lines: list[str], at: int, long: str) -> tuple[Path, list[str]]:
    """`lines` written to `path` with `long` put in as line `at` (0-based), and the lines as written."""
    written = lines[:at] + [long] + lines[at:]
    path.write_bytes("".join(line + "\n" for line in written).encode("utf-8"))
    return path, written


def peak_bytes(work) -> tuple[object, int]:
    """`work()`'s result and the peak of Python memory it allocated."""
    tracemalloc.start()
    try:
        result = work()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_10_mb_line_is_read_in_bounded_memory_cut_to_the_limit_and_counted(tmp_path, ruth):
    long = ("Naomi dit: " + ruth[0]) * (HUGE // len(ruth[0]))
    path, written = with_long_line(tmp_path / "ruth.fr", ruth, 40, long)
    (files, blocks), peak = peak_bytes(lambda: plan_blocks([str(path)], column="text", block_rows=16))
    assert peak < HUGE // 10, f"planning held {peak:,} bytes: the long line was read whole"
    [info] = files
    assert info.rows == len(written) == 86 and info.cut == 1 and info.empty == 0
    assert info.bytes == path.stat().st_size and info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    sentences, peak = peak_bytes(lambda: [s for b in blocks for s in read_block(b, column="text")])
    assert peak < HUGE // 10, f"reading the blocks held {peak:,} bytes"
    assert max(len(s) for s in sentences) == LIMIT and sentences[40] == long[:LIMIT]
    assert sentences[:40] + sentences[41:] == ruth  # every other line as it is, row i still line i
    # the limit travels with each block (to the actors that read them): a smaller one cuts more, each counted
    files, blocks = plan_blocks([str(path)], column="text", block_rows=16, max_chars=40)
    assert files[0].cut == sum(len(line) > 40 for line in written)
    assert [s for b in blocks for s in read_block(b, column="text")] == [line[:40] for line in written]


def test_a_long_line_of_wide_characters_is_cut_by_characters_and_its_tail_still_checked(tmp_path, ruth):
    wide = "路得记" * (3 * LIMIT)  # 3 bytes each in UTF-8
    path, _ = with_long_line(tmp_path / "wide.txt", ruth[:3], 1, wide)
    files, blocks = plan_blocks([str(path)], column="text", block_rows=2)
    assert files[0].cut == 1 and read_block(blocks[0], column="text")[1] == wide[:LIMIT]
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n" + wide.encode() + b"caf\xe9\n")  # past the limit: not embedded, but not UTF-8
    with pytest.raises(CorpusError, match=rf"bad.txt:2: not valid UTF-8 \(byte {len(wide.encode()) + 4} of the line"):
        plan_blocks([str(bad)], column="text", block_rows=2)


def test_a_text_read_whole_gets_its_long_line_cut_and_counted_in_the_log(tmp_path, ruth, caplog):
    """What mine, the test sets and `embed -o FILE.npy` read (`read_lines`)."""
    path, written = with_long_line(tmp_path / "ruth.fr", ruth, 3, "x" * HUGE)
    with caplog.at_level(logging.WARNING), open(path, "rb") as handle:
        lines, peak = peak_bytes(lambda: list(read_lines(handle, str(path))))
    assert peak < HUGE // 10 and lines == [line[:LIMIT] for line in written]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"{path}: 1 of 86 sentences are longer than {LIMIT} characters" in m for m in warned), warned


def test_a_long_parquet_value_is_cut_and_counted(tmp_path, ruth, caplog):
    long = "y" * (5 * LIMIT)
    pq.write_table(pa.table({"text": ruth[:5] + [long, None]}), tmp_path / "r.parquet", row_group_size=3)
    files, blocks = plan_blocks([str(tmp_path / "r.parquet")], column="text", block_rows=4)
    assert files[0].cut == 1 and files[0].empty == 1
    assert [s for b in blocks for s in read_block(b, column="text")] == ruth[:5] + [long[:LIMIT], ""]
    with caplog.at_level(logging.WARNING):
        assert list(read_column(tmp_path / "r.parquet", "text")) == ruth[:5] + [long[:LIMIT], ""]
    assert any("1 of 7 sentences are longer" in r.getMessage() for r in caplog.records)
