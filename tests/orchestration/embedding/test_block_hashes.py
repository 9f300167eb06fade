"""Each planned block carries the sha256 of the input it covers (issue 71): the reader refuses a block whose input
changed after it was planned, and a rerun reuses a written block only while its input's sha256 is the one its
record holds. On Ruth in French, rewritten to the same size with other lines."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestration.batch.actors import save_input_block
from orchestration.embed.blocks import completed
from orchestration.embed.folder import fingerprints
from orchestration.embedding.inputs import CorpusError, plan_blocks, read_block, read_block_text

ROWS = 16  # lines per block: Ruth's 85 verses in 6 blocks


@pytest.fixture
def ruth(book_lines) -> list[str]:
    return book_lines({"fr": "l"}, [8])["fr"]


def write(path: Path, lines: list[str]) -> Path:
    path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
    return path


def swapped(lines: list[str], i: int) -> list[str]:
    """`lines` with lines i and i + 1 swapped: the same bytes, so the same size and block offsets, other lines."""
    out = list(lines)
    out[i], out[i + 1] = out[i + 1], out[i]
    return out


def test_each_block_holds_the_sha256_of_its_bytes_and_a_block_changed_since_is_refused(tmp_path, ruth):
    path = write(tmp_path / "ruth.fr", ruth)
    _, blocks = plan_blocks([str(path)], column="text", block_rows=ROWS)
    data = path.read_bytes()
    ends = [b.offset for b in blocks[1:]] + [len(data)]
    assert [b.sha256 for b in blocks] == [
        hashlib.sha256(data[b.offset : end]).hexdigest() for b, end in zip(blocks, ends)
    ]

    write(path, swapped(ruth, 20))  # lines 21 and 22: block part-00001 (lines 17-32)
    assert path.stat().st_size == len(data)
    for block in blocks[:1] + blocks[2:]:  # the other blocks' lines are the planned ones: read as planned
        assert read_block(block, column="text") == ruth[block.first : block.first + block.rows]
    with pytest.raises(CorpusError) as refused:
        read_block(blocks[1], column="text")
    assert str(refused.value) == f"{path}: lines 17-32 (block part-00001) changed after it was planned; run again"


def test_a_parquet_block_holds_the_sha256_of_its_values_and_one_changed_since_is_refused(tmp_path, ruth):
    path = tmp_path / "ruth.parquet"
    pq.write_table(pa.table({"verse": ruth[:40] + [None] + ruth[41:]}), path, row_group_size=10)
    _, blocks = plan_blocks([str(path)], column="verse", block_rows=ROWS)
    text = read_block_text(blocks[2], column="verse")
    assert text.sentences == ruth[32:40] + [""] + ruth[41:48] and text.sha256 == blocks[2].sha256
    pq.write_table(pa.table({"verse": ruth[:40] + [""] + ruth[41:]}), path, row_group_size=10)  # null -> ""
    assert read_block(blocks[1], column="verse") == ruth[16:32]
    with pytest.raises(
        CorpusError, match=r"ruth.parquet: rows 33-48 \(block part-00002\) changed after it was planned"
    ):
        read_block(blocks[2], column="verse")


def test_a_rerun_keeps_the_blocks_whose_input_is_unchanged_and_embeds_the_changed_one_again(tmp_path, ruth):
    """The driver's side, without Ray: the records a run wrote, then a plan of the input rewritten since."""
    path, out = write(tmp_path / "ruth.fr", ruth), tmp_path / "out"
    options = dict(lang="fr", column="text", dtype="float32", block_rows=ROWS, backend="torch", max_chars=2000)

    def planned():
        files, blocks = plan_blocks([str(path)], column="text", block_rows=ROWS)
        return blocks, fingerprints(files, "5e", **options)

    blocks, fp = planned()
    assert completed(out, fp, blocks, force=False) == (set(), None)
    for block in blocks:  # what the actors' rows make of each block (`save_input_block`), vectors aside
        save_input_block(out, block, "fr", np.zeros((block.rows, 4), np.float32), 0, fp, block.sha256)
    assert completed(out, fp, blocks, force=False) == (set(range(6)), None)  # a rerun of the same input

    write(path, swapped(ruth, 40))  # lines 41 and 42: block part-00002
    blocks, changed = planned()
    assert changed[0] != fp[0] and changed[1] == fp[1]  # other bytes of the same input: the same job
    assert completed(out, changed, blocks, force=False) == ({0, 1, 3, 4, 5}, None)
    record = json.loads((out / "part-00002.json").read_text())
    assert "input_sha256" not in record  # its claim withdrawn before its arrays are written again

    write(path, ruth[:40])  # shorter: blocks 0-1 kept, block 2 (8 lines now) again, blocks 3-5 removed
    blocks, shorter = planned()
    assert completed(out, shorter, blocks, force=False) == ({0, 1}, None)
    assert sorted(p.name for p in out.glob("part-*.json")) == ["part-00000.json", "part-00001.json", "part-00002.json"]
    assert sorted(p.name for p in out.glob("fr/*.npy")) == ["part-00000.npy", "part-00001.npy", "part-00002.npy"]
    other = tmp_path / "other.fr"
    write(other, ruth)
    files, blocks = plan_blocks([str(other)], column="text", block_rows=ROWS)
    with pytest.raises(CorpusError, match="other inputs, model or options"):  # another input: needs --force
        completed(out, fingerprints(files, "5e", **options), blocks, force=False)
