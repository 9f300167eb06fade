"""`mine` never overwrites what it did not write: `mine.output_dir` holding a user's `manifest.json` and
`report.png` is refused before any work, with both files intact; its own output (a finished one, or the files
a killed run was writing) is rewritten on a rerun."""

from __future__ import annotations

import numpy as np
import pytest

from core import ownership
from evaluation.store_writer import save_block
from orchestration.cli import main
from orchestration.mine.report import output_folder
from tests.support.corpus import write_lines
from tests.support.runs import mined_manifest, store_uri

SENTINEL = b"a user's file: never overwrite me\n"


@pytest.fixture
def args(tmp_path, book_lines):
    lines = book_lines({"fr": "l", "en": "k"}, [8])
    write_lines(tmp_path / "fr.txt", lines["fr"])
    write_lines(tmp_path / "en.txt", lines["en"])
    return [
        "mine",
        f"run_dir={tmp_path / 'run'}",
        f"tracking.uri={store_uri(tmp_path)}",
        "mine.model=use",
        "mine.threshold=1.1",
        f"mine.inputs=[{{lang: fr, path: '{tmp_path / 'fr.txt'}'}}, {{lang: en, path: '{tmp_path / 'en.txt'}'}}]",
    ]


def test_a_users_manifest_and_report_are_never_overwritten(tmp_path, args, capsys):
    folder = tmp_path / "figures"
    folder.mkdir()
    (folder / "manifest.json").write_bytes(SENTINEL)
    (folder / "report.png").write_bytes(SENTINEL)
    assert main([*args, f"mine.output_dir={folder}"]) == 2
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("interlingua")]
    assert "mine.output_dir" in line and "manifest.json" in line and "report.png" in line and "Traceback" not in err
    assert (folder / "manifest.json").read_bytes() == SENTINEL and (folder / "report.png").read_bytes() == SENTINEL
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "report.png"]  # no work was started


def test_its_own_output_and_a_killed_runs_files_are_its_own(tmp_path):
    folder = tmp_path / "mine"
    (folder / "embeddings" / "fr" / "blocks").mkdir(parents=True)
    with pytest.raises(ownership.ForeignDataError, match="sentences.parquet"):  # no record names it: a user's
        (folder / "embeddings" / "fr" / "sentences.parquet").write_bytes(b"x")
        output_folder(folder).check_replaceable()
    ownership.begin_writes(folder, ["embeddings/fr/sentences.parquet"])  # as mine records it before writing it
    ownership.begin_writes(folder, ["manifest.json", "report.png", "pairs-fr-en.parquet"])
    (folder / "pairs-fr-en.parquet").write_bytes(b"half")  # killed before its manifest
    assert "pairs-fr-en.parquet" in output_folder(folder).check_replaceable()
    mined_manifest(folder, {"pairs-fr-en.parquet": ["fr", "en"]})
    ownership.end_writes(folder)
    (folder / "report.png").write_bytes(b"png")
    assert set(output_folder(folder).check_replaceable()) >= {"manifest.json", "report.png", "pairs-fr-en.parquet"}
    blocks = folder / "embeddings" / "fr" / "blocks"
    save_block(blocks, "part-00000", {"fr": np.zeros((2, 4), np.float32)}, index=0, fingerprint="fp")
    (blocks / "fr" / "part-00001.npy.tmp-0a1b2c3d").write_bytes(b"half")  # a block a killed run was writing
    assert {
        "embeddings/fr/blocks/part-00000.json",
        "embeddings/fr/blocks/fr/part-00000.npy",
        "embeddings/fr/blocks/fr/part-00001.npy.tmp-0a1b2c3d",
    } <= set(output_folder(folder).check_replaceable())
    (blocks / "fr" / "notes.txt").write_bytes(SENTINEL)
    with pytest.raises(ownership.ForeignDataError, match="embeddings/fr/blocks/fr/notes.txt"):
        output_folder(folder).check_replaceable()
    (blocks / "fr" / "notes.txt").unlink()
    (folder / "embeddings" / "fr" / "blocks" / "thesis.txt").write_bytes(SENTINEL)
    with pytest.raises(ownership.ForeignDataError, match="embeddings/fr/blocks/thesis.txt"):
        output_folder(folder).check_replaceable()
