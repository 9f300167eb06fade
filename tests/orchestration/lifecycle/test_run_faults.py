"""Fault injection over the whole `interlingua run`: each stage's inputs damaged in turn (a shard, the
manifest, the sentencepiece model, the model file, the tracking store) end in exit 1 or 2 with a one-line
cause, and nothing new is registered or promoted. One tiny trained run on real Bible text, reused."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestration import tracking
from orchestration.cli import main
from tests.conftest import SMALL_BOOKS
from tests.orchestration.helpers import TINY, free_ports
from tests.orchestration.lifecycle.test_run import LANGS, write_corpus


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def replace_with_dev(path: Path) -> None:
    shutil.copy(next((path.parent.parent / "dev").glob("*.parquet")), path)


def garble(path: Path) -> None:
    path.write_text('{"format": "interlingua-dataset/1", "splits": ')


def manifest_file(data: Path, split: str, index: int = 0) -> Path:
    return data / json.loads((data / "manifest.json").read_text())["splits"][split]["files"][index]["path"]


FAULTS = {  # what is damaged -> (the file, how, exit code, what the one line names)
    "a training shard": (lambda d, m: manifest_file(d, "train", 1), truncate, 2, "sha256"),
    "the test shard": (lambda d, m: manifest_file(d, "test"), replace_with_dev, 2, "sha256"),
    "the manifest": (lambda d, m: d / "manifest.json", garble, 2, "not a readable manifest"),
    "the sentencepiece model": (lambda d, m: d / "spm.model", truncate, 2, "sha256"),
    "the model file": (lambda d, m: m / "model.pt", truncate, 2, "recorded in lineage.json"),
}


@pytest.mark.slow
def test_every_damaged_input_of_a_run_ends_in_a_one_line_error_and_promotes_nothing(tmp_path, book_lines,
                                                                                     local_ray, capsys):
    template = write_corpus(tmp_path / "corpus", book_lines, SMALL_BOOKS)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    where = ["name=pipe", f"run_dir={tmp_path / 'run'}",
             f"prepare.sources=[{{kind: text, path: '{template}', languages: {LANGS}}}]",
             "prepare.split.dev_size=40", "prepare.split.test_size=40", "prepare.spm.vocab_size=1500",
             *TINY, "train.max_steps=10", "evaluate.shards=2"]
    assert main(["run", *where, f"tracking.uri={uri}"]) == 0  # trained, evaluated, registered, champion
    capsys.readouterr()
    data, model = tmp_path / "run" / "data", tmp_path / "run" / "train" / "model"
    versions = len(tracking.model_versions(uri, "pipe"))

    for fault, (where_is, damage, code, named) in FAULTS.items():
        victim = where_is(data, model)
        backup = victim.read_bytes()
        damage(victim)
        assert main(["run", *where, f"tracking.uri={uri}"]) == code, fault
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("interlingua run")]
        assert len(lines) == 1 and str(victim) in lines[0] and named in lines[0], (fault, err)
        assert "Traceback" not in err, (fault, err)
        victim.write_bytes(backup)

    (port,) = free_ports(1)  # the tracking store unreachable
    assert main(["run", *where, f"tracking.uri=http://127.0.0.1:{port}"]) == 1
    assert f"127.0.0.1:{port} is unreachable" in capsys.readouterr().err

    assert len(tracking.model_versions(uri, "pipe")) == versions  # nothing registered
    assert str(tracking.champion(uri, "pipe").version) == "1"
    assert main(["run", *where, f"tracking.uri={uri}"]) == 3  # repaired: nothing to do, as before the faults
