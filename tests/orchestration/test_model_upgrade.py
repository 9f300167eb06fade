"""`interlingua upgrade-model` writes through the output layer: a link is never followed out of the model
directory, a user's file in it is refused, and the converted directory is committed whole behind the fence.
Tiny untrained models saved as an older version did (model.pt): mechanics, no quality claim."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from core import fencing
from orchestration.adapters import model_dir as model_files
from orchestration.cli import main
from orchestration.embedding.export import upgrade_model_dir


def legacy_model_pt(path: Path) -> Path:
    """An untrained two-language model saved at `path` as the older versions did (`torch.save` of a dict)."""
    import torch

    from model.nmt import MultilingualNMT

    torch.manual_seed(0)
    model = MultilingualNMT(
        languages=["en", "fr"], vocab_size=40, embed_dim=8, encoder_hidden=8, decoder_hidden=8, shared_encoder=True
    )
    blob = {"args": model.args.model_dump(), "state_dict": model.state_dict(), "meta": {"step": 7}}
    torch.save(blob, path)
    return path


def legacy_dir(folder: Path) -> Path:
    """A model directory of an older version: model.pt, its lineage.json, and the other files (their contents
    are not read by the upgrade, only kept)."""
    folder.mkdir(parents=True)
    sha = hashlib.sha256(legacy_model_pt(folder / model_files.LEGACY_MODEL_FILE).read_bytes()).hexdigest()
    (folder / model_files.SPM_FILE).write_bytes(b"a sentencepiece model\n")
    (folder / model_files.CONFIG_FILE).write_text("name: old\n")
    (folder / model_files.PROGRESS_FILE).write_text('{"step": 7}\n')
    (folder / model_files.LINEAGE_FILE).write_text(json.dumps({"model_sha256": sha, "spm_sha256": "s"}))
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every entry beside and under `folder`'s parent: name -> bytes (b"" for a folder or a link's name)."""
    return {
        str(p.relative_to(folder.parent)): p.read_bytes() if p.is_file() and not p.is_symlink() else b""
        for p in sorted(folder.parent.rglob("*"))
    }


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("interlingua")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_model_pt_linking_out_of_the_folder_is_refused_naming_it(tmp_path, capsys):
    """model.pt a symbolic link to a file outside the model directory (here a valid older model: the
    conversion would succeed through it): exit 2, one line naming the link and not its target, nothing
    written."""
    (tmp_path / "elsewhere").mkdir()
    outside = legacy_model_pt(tmp_path / "elsewhere" / "secret.pt")
    model = legacy_dir(tmp_path / "run" / "model")
    (model / model_files.LEGACY_MODEL_FILE).unlink()
    (model / model_files.LEGACY_MODEL_FILE).symlink_to(outside)
    (model / model_files.LINEAGE_FILE).unlink()  # no recorded sha256 that the link's target would fail
    before = snapshot(model)

    assert main(["upgrade-model", str(model)]) == 2
    line = one_line(capsys.readouterr().err)
    assert model_files.LEGACY_MODEL_FILE in line and "symbolic link" in line and "secret" not in line, line
    assert snapshot(model) == before  # no model.safetensors, no staging folder left beside it


def test_a_users_file_in_the_model_directory_is_refused_and_kept_then_the_upgrade_is_whole(tmp_path, capsys):
    """A file interlingua did not write in the model directory: exit 2 naming it, the folder as it was. Moved
    out, the upgrade converts: model.safetensors beside every file as it was (model.pt kept), lineage.json
    recording the new file, no staging folder left."""
    model = legacy_dir(tmp_path / "run" / "model")
    (model / "notes.txt").write_text("my notes\n")
    before = snapshot(model)
    assert main(["upgrade-model", str(model)]) == 2
    line = one_line(capsys.readouterr().err)
    assert "notes.txt" in line and "did not write" in line, line
    assert snapshot(model) == before

    (model / "notes.txt").unlink()
    kept = {name: (model / name).read_bytes() for name in model_files.FILES if (model / name).is_file()}
    assert main(["upgrade-model", str(model)]) == 0
    assert sorted(p.name for p in model.parent.iterdir()) == ["model"]
    for name, data in kept.items():
        if name != model_files.LINEAGE_FILE:
            assert (model / name).read_bytes() == data, name
    lineage = json.loads((model / model_files.LINEAGE_FILE).read_text())
    assert lineage["model_sha256"] == model_files.file_sha256(model / model_files.MODEL_FILE)
    assert lineage["spm_sha256"] == "s"
    converted, meta = model_files.load(model / model_files.MODEL_FILE)
    assert converted.languages == ["en", "fr"] and meta.step == 7


def test_an_upgrade_whose_lease_was_taken_over_commits_nothing(tmp_path):
    """The commit is fenced (`core.fencing`): a holder whose lease another command took over writes no
    model.safetensors, and leaves the folder as it was and no staging folder."""

    class LeaseLost(Exception):
        pass

    def lost() -> None:
        raise LeaseLost("the lease was taken over")

    model = legacy_dir(tmp_path / "run" / "model")
    before = snapshot(model)
    with fencing.fenced(lost), pytest.raises(LeaseLost):
        upgrade_model_dir(model)
    assert snapshot(model) == before
