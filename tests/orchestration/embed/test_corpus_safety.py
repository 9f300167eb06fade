"""`interlingua embed` never deletes or overwrites what it did not write: an output directory holding other
files is refused, `--force` replaces only interlingua's own embeddings, an output holding its inputs is
refused, and an existing `-o FILE.npy` needs `--force`. Sentinel files, real Bible text; refused before Ray."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core import stage
from core.ownership import ForeignDataError
from evaluation.store_writer import save_block
from orchestration.cli import main
from orchestration.embed import blocks
from orchestration.embed import folder as output
from tests.support.runs import untrained_model_dir

SENTINEL = "a user's file: never delete me\n"


@pytest.fixture(scope="module")
def model_dir(small_dataset, tmp_path_factory):
    return untrained_model_dir(small_dataset, tmp_path_factory.mktemp("embed-safety") / "model")


@pytest.fixture
def args(tmp_path, model_dir, small_dataset, book_lines):
    text = tmp_path / "ruth.fr.txt"
    text.write_text("\n".join(book_lines({"fr": "l"}, [8])["fr"]) + "\n")
    return ["embed", f"dataset_dir={small_dataset.data_dir}", "-l", "fr", "--model", str(model_dir), "-i", str(text)]


def error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("interlingua")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def own_stale_block(folder, index: int = 0) -> None:
    """A block and its record as an earlier embed run of other inputs wrote them."""
    save_block(folder, f"part-{index:05d}", {"fr": np.zeros((2, 4), np.float32)}, index=index, fingerprint="other")


def old_layout(folder, blocks: int = 2, fp: str = "same") -> None:
    """A complete output of the earlier embed layout: part-N.npy beside its record part-N.json, and the
    manifest of format interlingua-embeddings/1."""
    folder.mkdir(exist_ok=True)
    for index in range(blocks):
        np.save(folder / f"part-{index:05d}.npy", np.zeros((2, 4), np.float32))
        record = {"name": f"part-{index:05d}.npy", "index": index, "fingerprint": fp, "rows": 2, "sha256": "0" * 64}
        (folder / f"part-{index:05d}.json").write_text(json.dumps(record))
    blocks = [{"name": f"part-{i:05d}.npy", "rows": 2} for i in range(blocks)]
    (folder / "manifest.json").write_text(
        json.dumps(
            {"format": "interlingua-embeddings/1", "fingerprint": fp, "lang": "fr", "model": {}, "blocks": blocks}
        )
    )


def test_force_never_deletes_a_users_files_in_the_output(tmp_path, args, capsys):
    out = tmp_path / "out"
    out.mkdir()
    own_stale_block(out)
    (out / "part-1-thesis.txt").write_text(SENTINEL)
    (out / "manifest.json").write_text('{"my": "own manifest"}\n')
    assert main([*args, "-o", str(out), "--force"]) == 2
    line = error(capsys)
    assert "part-1-thesis.txt" in line and "manifest.json" in line and str(out) in line
    assert (out / "part-1-thesis.txt").read_text() == SENTINEL
    assert json.loads((out / "manifest.json").read_text()) == {"my": "own manifest"}
    assert (out / "fr" / "part-00000.npy").exists()  # nothing at all removed


def test_force_removes_its_own_stale_embeddings_only(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    own_stale_block(out, 0)
    own_stale_block(out, 1)
    (out / "fr" / "part-00002.npy.tmp-0a1b2c3d").write_bytes(b"half")
    with pytest.raises(blocks.CorpusError, match="--force"):
        blocks.completed(out, "new", [], force=False)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    done, previous = blocks.completed(out, "new", [], force=True)
    assert done == set() and sorted(previous) == [str(p) for p in before]
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # nothing removed before the new is whole
    replace_whole(out, previous)
    (out / "notes.txt").write_text(SENTINEL)
    own_stale_block(out)
    with pytest.raises(ForeignDataError, match="notes.txt"):
        blocks.completed(out, "new", [], force=True)
    assert (out / "notes.txt").read_text() == SENTINEL and (out / "part-00000.json").exists()
    (out / "fr" / "notes.txt").write_text(SENTINEL)  # inside the language folder too
    (out / "notes.txt").unlink()
    with pytest.raises(ForeignDataError, match="fr/notes.txt"):
        blocks.completed(out, "new", [], force=True)
    assert (out / "fr" / "notes.txt").read_text() == SENTINEL and (out / "fr" / "part-00000.npy").exists()


def test_a_users_file_named_like_a_temporary_block_of_another_form_is_not_ours(tmp_path):
    """Only `storage.replace_bytes`'s own temporary name (unique to one write) is a block being written; a
    user's `part-N.tmp.npy` is the user's: neither deleted before the work nor replaced with --force."""
    out = tmp_path / "out"
    out.mkdir()
    own_stale_block(out, 0)
    (out / "fr" / "part-00002.tmp.npy").write_text(SENTINEL)
    for force in (False, True):
        with pytest.raises(ForeignDataError, match="fr/part-00002.tmp.npy"):
            blocks.completed(out, "new", [], force=force)
    assert (out / "fr" / "part-00002.tmp.npy").read_text() == SENTINEL


def test_an_output_of_the_earlier_layout_is_ours_to_replace_with_force_only(tmp_path):
    """Blocks beside their records (part-N.npy, part-N.json) and the old manifest: recognised as interlingua's,
    never resumed (even of the same inputs), refused without --force, removed with it (its own files alone)."""
    out = tmp_path / "out"
    old_layout(out)
    (out / "part-00003.npy.tmp-0a1b2c3d").write_bytes(b"half")  # a killed run of that layout
    with pytest.raises(blocks.CorpusError, match="other inputs.*--force"):
        blocks.completed(out, "same", [], force=False)
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json",
        "part-00000.json",
        "part-00000.npy",
        "part-00001.json",
        "part-00001.npy",
        "part-00003.npy.tmp-0a1b2c3d",
    ]
    (out / "thesis.txt").write_text(SENTINEL)
    with pytest.raises(ForeignDataError, match="thesis.txt"):
        blocks.completed(out, "same", [], force=True)
    assert (out / "thesis.txt").read_text() == SENTINEL and (out / "part-00001.npy").exists()
    (out / "thesis.txt").unlink()
    done, previous = blocks.completed(out, "same", [], force=True)
    assert done == set()
    replace_whole(out, previous)


def replace_whole(out, previous) -> None:
    """What embed does with --force over other embeddings: the new blocks staged beside `out`, swapped in whole;
    then only the new output is there."""
    folder = output.output_folder(out)
    assert blocks.replacement(folder, previous)  # staged
    staged = []

    def work(staging):
        assert staging.local != out and (out / "part-00000.json").exists()  # the old output whole meanwhile
        save_block(staging.local, "part-00000", {"fr": np.ones((2, 4), np.float32)}, index=0, fingerprint="new")
        staged.append(staging)
        return stage.Manifest(None, None)

    stage.run(stage.always(folder), work)
    staging = staged[0]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "fr",
        "fr/part-00000.npy",
        "part-00000.json",
    ]
    assert not staging.local.exists() and [p.name for p in out.parent.iterdir()] == ["out"]


def test_force_over_the_earlier_layout_keeps_a_users_file(tmp_path, args, capsys):
    out = tmp_path / "out"
    old_layout(out)
    (out / "part-1-thesis.txt").write_text(SENTINEL)
    assert main([*args, "-o", str(out), "--force"]) == 2
    assert "part-1-thesis.txt" in error(capsys)
    assert (out / "part-1-thesis.txt").read_text() == SENTINEL and len(list(out.iterdir())) == 6


def test_an_output_holding_the_inputs_is_refused(tmp_path, args, capsys):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "ruth.txt").write_text((tmp_path / "ruth.fr.txt").read_text())
    args = [a if not a.endswith("ruth.fr.txt") else str(folder) for a in args]
    assert main([*args, "-o", str(folder)]) == 2
    assert "ruth.txt" in error(capsys)
    assert sorted(p.name for p in folder.iterdir()) == ["ruth.txt"]
    nested = folder / "out"
    nested.mkdir()
    (nested / "ruth-copy.txt").write_text(SENTINEL)
    with pytest.raises(output.CorpusError, match="inside the output directory"):
        output.check_not_inside(nested, [output.InputFile(str(nested / "ruth-copy.txt"), "text", 1, "", 1, 0)])


def test_an_existing_npy_needs_force(tmp_path, args, capsys):
    target = tmp_path / "mine.npy"
    np.save(target, np.arange(3))
    assert main([*args, "-o", str(target)]) == 2
    assert "--force" in error(capsys)
    assert np.array_equal(np.load(target), np.arange(3))


def test_force_replaces_only_an_embeddings_array_never_an_input_or_another_file(tmp_path):
    from orchestration.config import ConfigError
    from orchestration.embed.to_file import check_npy_output

    text = tmp_path / "input.npy"  # a text file with an array's name
    text.write_text(SENTINEL)
    with pytest.raises(ConfigError, match="also an input"):
        check_npy_output(str(text), [str(text)], force=True)
    link = tmp_path / "link.npy"
    link.symlink_to(text)
    with pytest.raises(ConfigError, match="also an input"):
        check_npy_output(str(link), [str(text)], force=True)
    with pytest.raises(ForeignDataError, match="not an \\(N, D\\) array"):
        check_npy_output(str(text), [str(tmp_path / "other.txt")], force=True)
    np.save(tmp_path / "ids.npy", np.arange(3))  # an array, but not embeddings
    with pytest.raises(ForeignDataError, match="not an \\(N, D\\) array"):
        check_npy_output(str(tmp_path / "ids.npy"), ["-"], force=True)
    assert text.read_text() == SENTINEL and np.array_equal(np.load(tmp_path / "ids.npy"), np.arange(3))
    np.save(tmp_path / "old.npy", np.zeros((2, 4), np.float32))  # what embed writes: replaced with --force
    check_npy_output(str(tmp_path / "old.npy"), ["-"], force=True)


def test_a_second_writer_to_one_output_is_refused_and_the_lock_is_beside_it(tmp_path):
    """Two `embed` into one folder: the second exits 5 (AlreadyRunning) naming the holder, before any work; the
    lock file sits beside the folder (the folder holds only the output) and is gone once released."""
    from orchestration.adapters.lock import AlreadyRunning, output_lock

    out = tmp_path / "out"
    with output_lock(out, "embed"):
        assert (tmp_path / ".out.lock").is_file() and not out.exists()
        with pytest.raises(AlreadyRunning, match="two `interlingua embed` never write one output"):
            with output_lock(str(out), "embed"):
                pass
    assert not (tmp_path / ".out.lock").exists()
    (tmp_path / ".out.lock").symlink_to(tmp_path / "elsewhere")  # never written through
    with pytest.raises(OSError):
        with output_lock(out, "embed"):
            pass
    assert not (tmp_path / "elsewhere").exists()
