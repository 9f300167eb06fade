"""Ray Train's folders under a training directory (`orchestration.train.folders`): one per lease holder in a
bucket, the checkpoint a new folder's run resumes from, and what is removed (Ray's layout only)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from core import ownership
from orchestration.train import folders
from orchestration.train.record import TrainRecord
from orchestration.train.train_dir import check_train_dir

SENTINEL = "a user's file: never delete me\n"
A, B = "ray-0123456789ab", "ray-ba9876543210"


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _record(**values) -> TrainRecord:
    """run.json as it reads back."""
    return TrainRecord.model_validate_json(json.dumps({"fingerprint": "0f", "run_id": "r", **values}))


def _snapshot(*steps: int) -> str:
    return json.dumps(
        {
            "checkpoint_results": [
                {"checkpoint_dir_name": f"checkpoint_{step:06d}", "metrics": {"step": step}} for step in steps
            ]
        }
    )


def test_a_lease_holder_writes_a_folder_of_its_own_and_a_local_run_the_shared_one():
    assert folders.new_folder(None) == "ray"
    mine, theirs = (folders.new_folder({"holder": "h", "process": {}}) for _ in range(2))
    assert re.fullmatch(r"ray-[0-9a-f]{12}", mine) and mine != theirs
    assert folders.current(None) == "ray" and folders.current(_record(ray_dir=A)) == A
    assert folders.current(_record()) == "ray"  # run.json without one


def test_the_last_checkpoint_is_the_newest_registered_in_the_recorded_folder_else_the_one_it_resumed_from(tmp_path):
    # the snapshot's order is not the steps' (Ray lists them by score when it keeps the best)
    _tree(tmp_path, {f"{A}/checkpoint_manager_snapshot.json": _snapshot(30, 10, 20)})
    assert folders.last_checkpoint(tmp_path, _record(ray_dir=A)) == f"{A}/checkpoint_000030"
    # the folder's driver died before its first checkpoint: the one it had resumed from is still the last
    assert (
        folders.last_checkpoint(tmp_path, _record(ray_dir=B, resumed_from=f"{A}/checkpoint_000030"))
        == f"{A}/checkpoint_000030"
    )
    assert folders.last_checkpoint(tmp_path, _record(ray_dir=B)) is None
    _tree(tmp_path, {"ray/checkpoint_manager_snapshot.json": _snapshot(5)})  # a run recorded before the folders
    assert folders.last_checkpoint(tmp_path, _record()) == "ray/checkpoint_000005"


def test_the_other_ray_folders_are_removed_when_they_hold_rays_layout_only(tmp_path, caplog):
    _tree(
        tmp_path,
        {
            "run.json": '{"fingerprint": "0f"}',
            f"{A}/checkpoint_manager_snapshot.json": "{}",
            f"{A}/checkpoint_000010/state.pt": "",
            f"{B}/checkpoint_000020/state.pt": "",
            f"{B}/checkpoint_000020/model.safetensors": "",
            "ray/.validate_storage_marker": "",
            "ray-4444444444ab/checkpoint_1/state.pt": "",
            "ray-4444444444ab/notes.md": SENTINEL,
            "ray-notes/a.txt": SENTINEL,
        },
    )
    with caplog.at_level(logging.WARNING):
        folders.remove_others(tmp_path, keep={A})
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == [
        f"{A}/checkpoint_000010/state.pt",
        f"{A}/checkpoint_manager_snapshot.json",
        "ray-4444444444ab/checkpoint_1/state.pt",
        "ray-4444444444ab/notes.md",
        "ray-notes/a.txt",
        "run.json",
    ]
    assert "ray-4444444444ab holds what interlingua did not write (notes.md)" in caplog.text  # warned, kept


def test_the_checkpoints_a_folders_snapshot_no_longer_lists_are_pruned_in_that_folder(tmp_path):
    _tree(
        tmp_path,
        {
            f"{A}/checkpoint_manager_snapshot.json": _snapshot(20),
            f"{A}/checkpoint_000010/state.pt": "",
            f"{A}/checkpoint_000020/state.pt": "",
            "ray/checkpoint_000010/state.pt": "",
        },
    )
    folders.prune_checkpoints(tmp_path, A)
    assert not (tmp_path / A / "checkpoint_000010").exists() and (tmp_path / A / "checkpoint_000020").is_dir()
    assert (tmp_path / "ray" / "checkpoint_000010" / "state.pt").exists()  # another folder: not this run's record


def test_a_lease_holders_folder_is_the_products_only_in_rays_layout(tmp_path):
    _tree(
        tmp_path,
        {
            "run.json": '{"fingerprint": "0f"}',
            f"{A}/checkpoint_000010/state.pt": "",
            f"{A}/checkpoint_manager_snapshot.json": "{}",
        },
    )
    assert f"{A}/checkpoint_000010/state.pt" in check_train_dir(tmp_path)
    _tree(tmp_path, {"ray-mine/notes.md": SENTINEL, f"{A}/README.txt": SENTINEL})
    with pytest.raises(ownership.ForeignDataError) as refused:
        check_train_dir(tmp_path)
    assert f"{A}/README.txt" in str(refused.value) and "ray-mine" in str(refused.value)
