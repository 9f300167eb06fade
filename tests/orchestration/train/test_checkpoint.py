"""Checkpoints and the exported model on a full disk: nothing partial is ever handed on."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from orchestration.train import checkpoint
from orchestration.train.checkpoint import TrainingProgress, TrainingState


def test_disk_full_while_exporting_the_model_keeps_the_previous_model(tmp_path, monkeypatch):
    import shutil

    from ray.train import Checkpoint

    checkpoint_dir = tmp_path / "checkpoint"
    checkpoint_dir.mkdir()
    for name, text in {
        "model.safetensors": "new weights",
        "spm.model": "new spm",
        "config.yaml": "name: new",
        "progress.json": json.dumps({"step": 20, "dev_error": 0.5}),
        "state.pt": "optimizer",
    }.items():
        (checkpoint_dir / name).write_text(text)
    model_dir = tmp_path / "train" / "model"
    model_dir.mkdir(parents=True)
    old = {"model.safetensors": "old weights", "spm.model": "old spm", "config.yaml": "name: old"}
    for name, text in old.items():
        (model_dir / name).write_text(text)

    copies = []
    real_copy = shutil.copyfile  # what copytree's copy2 calls for the bytes

    def disk_fills(src, dst, **kwargs):
        copies.append(src)
        if len(copies) == 2:
            raise OSError(28, "No space left on device", str(dst))
        return real_copy(src, dst, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", disk_fills)
    with pytest.raises(OSError, match="No space left on device"):
        checkpoint.export(Checkpoint.from_directory(str(checkpoint_dir)), model_dir)
    assert {p.name: p.read_text() for p in model_dir.iterdir()} == old  # the previous model, whole

    monkeypatch.setattr(shutil, "copyfile", real_copy)  # space freed: the rerun's export replaces it
    progress = checkpoint.export(Checkpoint.from_directory(str(checkpoint_dir)), model_dir)
    assert (progress.step, progress.dev_error) == (20, 0.5) and (
        model_dir / "model.safetensors"
    ).read_text() == "new weights"
    assert not (model_dir / "state.pt").exists()
    assert sorted(p.name for p in model_dir.parent.iterdir()) == ["model"]  # no staging or previous copies left


def test_disk_full_while_writing_a_checkpoint_registers_nothing(tmp_path, monkeypatch):
    """rank 0 writes the checkpoint into a private temporary directory and reports it only when whole:
    ENOSPC on the way is an error of that worker (FailureConfig restarts from the last registered
    checkpoint), never a partial checkpoint handed to Ray."""
    import ray.train

    from model.nmt import MultilingualNMT

    model = MultilingualNMT(languages=["en", "fr"], vocab_size=50, embed_dim=8, encoder_hidden=8, decoder_hidden=8)
    optimizer = torch.optim.Adam(model.parameters())
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    spm_model = tmp_path / "spm.model"
    spm_model.write_bytes(b"spm")
    state = TrainingState(
        model.state_dict(),
        optimizer.state_dict(),
        scheduler.state_dict(),
        TrainingProgress(step=20, dev_error=0.5, best_step=20),
        model.state_dict(),
    )

    def report() -> None:
        checkpoint.report(0, state, model.args, spm_model=str(spm_model), config={"name": "t"}, metrics={})

    reported, written = [], []
    monkeypatch.setattr(ray.train, "report", lambda metrics, checkpoint=None, **_: reported.append(checkpoint))

    def disk_fills(model, path, **meta):  # state.pt fits, model.safetensors does not
        written.append(Path(path).parent)
        assert (Path(path).parent / checkpoint.STATE_FILE).is_file()
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(checkpoint, "save_model", disk_fills)
    with pytest.raises(OSError, match="No space left on device"):
        report()
    assert reported == []  # nothing reached Ray
    assert not written[0].exists()  # the partial checkpoint directory is gone

    monkeypatch.undo()
    seen = {}

    def uploaded(metrics, checkpoint=None, checkpoint_upload_mode=None):  # as Ray does: the local copy deleted
        seen.update(files=sorted(os.listdir(checkpoint.path)), mode=checkpoint_upload_mode)
        shutil.rmtree(checkpoint.path)

    monkeypatch.setattr(ray.train, "report", uploaded)
    report()
    assert seen["files"] == ["config.yaml", "model.safetensors", "progress.json", "spm.model", "state.pt"]
    assert seen["mode"] == ray.train.CheckpointUploadMode.ASYNC  # uploaded behind the next steps


def test_a_checkpoint_restores_the_progress_it_saved(tmp_path, monkeypatch):
    """What `report` writes is what `restore` gives back to a restarted worker, typed; the best weights, which
    differ from the current ones, come back from the checkpoint's model file (state.pt does not repeat them)."""
    import ray.train

    from model.nmt import MultilingualNMT

    model = MultilingualNMT(languages=["en", "fr"], vocab_size=50, embed_dim=8, encoder_hidden=8, decoder_hidden=8)
    optimizer = torch.optim.Adam(model.parameters())
    spm_model = tmp_path / "spm.model"
    spm_model.write_bytes(b"spm")
    progress = TrainingProgress(
        step=40,
        elapsed_s=12.5,
        dev_error=0.25,
        best_step=30,
        bad_evals=1,
        history=[{"resumed_at_step": 20, "world": 2}],
        world=2,
    )
    kept = tmp_path / "kept"
    monkeypatch.setattr(ray.train, "report", lambda metrics, checkpoint=None, **_: shutil.move(checkpoint.path, kept))
    best = {name: value + 1.0 for name, value in model.state_dict().items()}
    checkpoint.report(
        0,
        TrainingState(model.state_dict(), optimizer.state_dict(), None, progress, best),
        model.args,
        spm_model=str(spm_model),
        config={"name": "t"},
        metrics={},
    )
    assert "best_model" not in torch.load(kept / "state.pt", weights_only=True)
    monkeypatch.setattr(ray.train, "get_checkpoint", lambda: ray.train.Checkpoint.from_directory(str(kept)))
    restored = checkpoint.restore()
    assert restored.progress == progress and restored.scheduler is None
    assert restored.best_model.keys() == best.keys()
    assert all(torch.equal(restored.best_model[name], best[name]) for name in best)
    assert all(torch.equal(restored.model[name], value) for name, value in model.state_dict().items())
    older = torch.load(kept / "state.pt", weights_only=True)  # a checkpoint of before: the best weights in it
    torch.save({**older, "best_model": model.state_dict()}, kept / "state.pt")
    assert all(torch.equal(checkpoint.restore().best_model[name], value) for name, value in model.state_dict().items())
    assert json.loads((kept / "progress.json").read_text())["best_step"] == 30
    monkeypatch.setattr(ray.train, "get_checkpoint", lambda: None)  # a new driver: the run's last checkpoint
    for resume_from in (str(kept), f"file://{kept}"):
        assert checkpoint.restore(resume_from).progress == progress


def test_a_checkpoint_of_another_plan_version_resumes_at_the_next_epoch(caplog):
    """Positions saved before plans had versions (plan 1) name batches this version cannot rebuild:
    the stream starts the epoch after the furthest one, and says so; positions of this plan resume."""
    from model.stream import PLAN, DataPosition
    from orchestration.train.worker import _stream_start

    old = TrainingProgress.from_dict({"step": 9, "data": {"epoch": 3, "window": 0, "batch": 4}})
    assert old.data == DataPosition(3, 0, 4, plan=1)
    saved = {
        0: {"position": {"epoch": 3, "window": 0, "batch": 4}, "digest": "ab"},
        1: {"position": {"epoch": 4, "window": 2, "batch": 1}, "digest": "cd"},
    }
    state = TrainingState({}, {}, None, old, {}, saved)
    with caplog.at_level("WARNING"):
        assert _stream_start(state, 0, 2) == _stream_start(state, 1, 2) == (DataPosition(epoch=5), "")
    assert f"planned by plan 1, this version plans with {PLAN}" in caplog.text
    current = {r: {"position": {**p["position"], "plan": PLAN}, "digest": p["digest"]} for r, p in saved.items()}
    assert _stream_start(TrainingState({}, {}, None, old, {}, current), 1, 2) == (DataPosition(4, 2, 1), "cd")


SENTINEL = "a user's file: never delete me\n"


def test_an_export_never_removes_a_users_file_from_the_model_directory(tmp_path):
    from ray.train import Checkpoint

    from core.ownership import ForeignDataError

    checkpoint_dir = tmp_path / "checkpoint"
    checkpoint_dir.mkdir()
    for name in ("model.safetensors", "spm.model", "config.yaml"):
        (checkpoint_dir / name).write_text("new")
    (checkpoint_dir / "progress.json").write_text(json.dumps({"step": 3}))
    model_dir = tmp_path / "train" / "model"
    model_dir.mkdir(parents=True)
    (model_dir / "model.safetensors").write_text("old")
    (model_dir / "notes.txt").write_text(SENTINEL)
    with pytest.raises(ForeignDataError, match="notes.txt"):
        checkpoint.export(Checkpoint.from_directory(str(checkpoint_dir)), model_dir)
    assert (model_dir / "notes.txt").read_text() == SENTINEL and (model_dir / "model.safetensors").read_text() == "old"
    assert sorted(p.name for p in model_dir.parent.iterdir()) == ["model"]  # nothing staged


def test_an_export_to_a_store_replaces_only_a_models_files_with_the_weights_removed_first(tmp_path, monkeypatch):
    """At a URI (here `file://`, the calls every store takes): a user's file refuses the export before anything
    is copied; the old model.safetensors is removed before the new files go up (an upload that fails leaves no
    weights beside files of another model), and a finished export leaves only the new model's files."""
    import tempfile

    from ray.train import Checkpoint

    from core import storage, transfer
    from core.ownership import ForeignDataError

    scratch = tmp_path / "scratch"  # this host's temp folder: where a store's export is staged
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    checkpoint_dir = tmp_path / "checkpoint"
    checkpoint_dir.mkdir()
    for name in ("model.safetensors", "spm.model", "config.yaml", "state.pt"):
        (checkpoint_dir / name).write_text(f"new {name}")
    (checkpoint_dir / "progress.json").write_text(json.dumps({"step": 7}))
    model_dir = tmp_path / "store" / "model"
    model_dir.mkdir(parents=True)
    for name in ("model.safetensors", "spm.model", "lineage.json"):
        (model_dir / name).write_text(f"old {name}")
    uri = f"file://{model_dir}"

    (model_dir / "notes.txt").write_text(SENTINEL)
    with pytest.raises(ForeignDataError, match="notes.txt"):
        checkpoint.export(Checkpoint.from_directory(str(checkpoint_dir)), uri)
    assert sorted(storage.files(uri)) == ["lineage.json", "model.safetensors", "notes.txt", "spm.model"]
    (model_dir / "notes.txt").unlink()

    def upload_fails(*args, **kwargs):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(transfer, "upload_dir", upload_fails)
        with pytest.raises(OSError, match="No space left on device"):
            checkpoint.export(Checkpoint.from_directory(str(checkpoint_dir)), uri)
    assert "model.safetensors" not in storage.files(uri)  # no reader takes what is left for a whole model
    assert list(scratch.iterdir()) == []

    progress = checkpoint.export(Checkpoint.from_directory(str(checkpoint_dir)), uri)
    assert progress.step == 7
    assert {name: (model_dir / name).read_text() for name in storage.files(uri)} == {
        "config.yaml": "new config.yaml",
        "model.safetensors": "new model.safetensors",
        "progress.json": json.dumps({"step": 7}),
        "spm.model": "new spm.model",
    }  # the old lineage.json, which the new model lacks, removed; the training state never exported
    assert sorted(p.name for p in model_dir.parent.iterdir()) == ["model"] and list(scratch.iterdir()) == []


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_train_force_removes_the_runs_own_files_only(tmp_path, small_dataset):
    from core import ownership
    from orchestration.train.driver import train
    from orchestration.train.train_dir import check_train_dir
    from tests.support.runs import config_for

    config = config_for(small_dataset, tmp_path)
    train_dir = Path(config.train_dir)
    _tree(
        train_dir,
        {
            **dict.fromkeys(
                (
                    "config.yaml",
                    "ray/checkpoint_000001/state.pt",
                    "workers/rank-0.json",
                    "model/model.safetensors",
                    "model/lineage.json",
                    ".model.partial/model.safetensors",
                ),
                "{}",
            ),
            "run.json": '{"fingerprint": "0f"}',
            "model/my-notes.txt": SENTINEL,
            "paper.tex": SENTINEL,
        },
    )
    with pytest.raises(ownership.ForeignDataError, match=r"model/my-notes.txt.*paper.tex"):
        train(config, force=True)
    assert (train_dir / "model" / "model.safetensors").exists() and (train_dir / "paper.tex").read_text() == SENTINEL
    (train_dir / "model" / "my-notes.txt").unlink()
    (train_dir / "paper.tex").unlink()
    ownership.remove_ours(train_dir, check_train_dir(train_dir), keep_root=True)  # what --force then does
    assert train_dir.is_dir() and not list(train_dir.iterdir())


def test_a_training_directory_without_its_record_holds_no_file_of_the_product(tmp_path):
    """A user's config.yaml and model files where no run.json vouches for them are never taken for a run's."""
    from core import ownership
    from orchestration.train.train_dir import check_train_dir

    _tree(tmp_path, {"config.yaml": SENTINEL, "model/model.safetensors": SENTINEL})
    with pytest.raises(ownership.ForeignDataError, match=r"config.yaml, model"):
        check_train_dir(tmp_path)
    (tmp_path / "run.json").write_text('{"not": "a state"}')  # a JSON file the product did not write
    with pytest.raises(ownership.ForeignDataError, match=r"config.yaml, model, run.json"):
        check_train_dir(tmp_path)


def test_only_the_models_own_staging_names_are_the_products(tmp_path):
    """`.model.partial` and `.model.old-<pid>` holding a model's files are the product's; a user's `.model.bak/`,
    or a staging name holding something else, is not."""
    from core import ownership
    from orchestration.train.train_dir import check_train_dir

    _tree(
        tmp_path,
        {
            "run.json": '{"fingerprint": "0f"}',
            ".model.partial/model.safetensors": "{}",
            ".model.old-123/spm.model": "",
            ".model.bak/model.safetensors": SENTINEL,
            ".model.old-9/notes.txt": SENTINEL,
        },
    )
    with pytest.raises(ownership.ForeignDataError, match=r"\.model\.bak, \.model\.old-9/notes.txt"):
        check_train_dir(tmp_path)
    (tmp_path / ".model.old-9" / "notes.txt").unlink()
    (tmp_path / ".model.bak" / "model.safetensors").unlink()
    (tmp_path / ".model.bak").rmdir()
    assert {".model.partial", ".model.old-123/spm.model", ".model.old-9"} <= set(check_train_dir(tmp_path))


def test_files_in_ray_and_workers_are_the_products_only_in_their_layout(tmp_path):
    from core import ownership
    from orchestration.train.train_dir import check_train_dir

    _tree(
        tmp_path,
        {
            "run.json": '{"fingerprint": "0f"}',
            "ray/.validate_storage_marker": "",
            "ray/checkpoint_manager_snapshot.json": "{}",
            "ray/checkpoint_2026-11-26_10-00-00.1/state.pt": "",
            "ray/checkpoint_2026-11-26_10-00-00.1/model.safetensors": "",
            "workers/rank-1.json": "{}",
        },
    )
    assert "ray/checkpoint_2026-11-26_10-00-00.1/state.pt" in check_train_dir(tmp_path)
    _tree(
        tmp_path,
        {
            "ray/README.txt": SENTINEL,
            "workers/my-notes.txt": SENTINEL,
            "ray/checkpoint_2026-11-26_10-00-00.1/notes.md": SENTINEL,
        },
    )
    with pytest.raises(
        ownership.ForeignDataError,
        match=r"ray/README.txt.*notes.md.*workers/my-notes.txt|"
        r"ray/README.txt.*workers/my-notes.txt",
    ):
        check_train_dir(tmp_path)


def test_starting_over_keeps_the_last_model_and_its_record_until_the_new_ones_replace_them(tmp_path):
    from orchestration.train.train_dir import check_train_dir, start_over

    _tree(
        tmp_path,
        {
            "run.json": '{"fingerprint": "0f", "done": true}',
            "config.yaml": "name: x\n",
            "ray/checkpoint_1/state.pt": "",
            "workers/rank-0.json": "{}",
            "model/model.safetensors": "weights",
            "model/spm.model": "spm",
        },
    )
    start_over(tmp_path, check_train_dir(tmp_path))
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "model",
        "model/model.safetensors",
        "model/spm.model",
        "run.json",
    ]
