"""No command deletes or changes a user's file anywhere in the output trees it writes.

The trees are generated, not listed: every command that writes a folder runs once, then a user's file is
put in every folder of every tree it wrote (its subfolders too: Ray's checkpoints, each language's
embeddings, the search results, the staging left by nobody), and every command runs again with `--force`
where it has one. Each either finishes or refuses (exit 2, naming a file of the user's); afterwards every
user's file is there, byte for byte. Real Bible text, a tiny model.

Slow (a Beam job, Ray training, evaluation, embedding and mining: about two minutes): the rule is about
the trees the commands really write, which no unit test of one check generates.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from core.errors import Exit
from orchestration.cli import main
from tests.support.corpus import LANGS, SMALL_BOOKS, write_corpus, write_lines
from tests.support.runs import TINY

pytestmark = [pytest.mark.beam, pytest.mark.ray]


def commands(tmp_path: Path, book_lines) -> dict[str, tuple[list[str], bool]]:
    """{name: (argv, whether it has --force)} of every command that writes an output tree."""
    corpus = write_corpus(tmp_path / "corpus", book_lines, SMALL_BOOKS)
    texts = book_lines({"fr": "l", "en": "k"}, [8])
    write_lines(tmp_path / "corpus" / "ruth.fr", texts["fr"])
    write_lines(tmp_path / "corpus" / "ruth.en", texts["en"][::-1])
    run = tmp_path / "out" / "run"
    common = [f"run_dir={run}", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
              f"prepare.sources=[{{kind: text, path: '{corpus}', languages: {LANGS}}}]",
              "prepare.split.dev_size=40", "prepare.split.test_size=40", "prepare.spm.vocab_size=1500",
              *TINY, "train.max_steps=10"]
    model = str(run / "train" / "model")
    return {
        "prepare": (["prepare", *common], True),
        "train": (["train", *common], True),
        "evaluate": (["evaluate", *common], True),
        "embed": (["embed", *common, "-l", "fr", "--model", model, "-i", str(tmp_path / "corpus" / "ruth.fr"),
                   "-o", str(tmp_path / "out" / "embedded")], True),
        "mine": (["mine", *common, f"mine.model={model}", f"mine.output_dir={tmp_path / 'out' / 'mined'}",
                  "mine.threshold=1.05", f"mine.inputs=[{{lang: fr, path: '{tmp_path / 'corpus' / 'ruth.fr'}'}}, "
                  f"{{lang: en, path: '{tmp_path / 'corpus' / 'ruth.en'}'}}]"], False),
        "export": (["export", *common, "--model", model, "-o", str(tmp_path / "out" / "onnx")], False),
    }


def plant(root: Path, folders: list[Path], mark: str) -> dict[Path, str]:
    """A user's file in each of `folders` (under `root`); {path: sha256}."""
    planted = {}
    for i, folder in enumerate(folders):
        path = folder / f"zz-users-{mark}-{i}.txt"
        path.write_text(f"a user's file in {folder.relative_to(root)}: never delete me\n")
        planted[path] = hashlib.sha256(path.read_bytes()).hexdigest()
    return planted


def rerun_all(todo, out: Path, planted: dict[Path, str], capsys) -> dict[str, int]:
    """Every command again (with --force where it has one); each finishes or refuses naming a user's file,
    and no user's file changes. {name: exit code}."""
    codes = {}
    for name, (argv, has_force) in todo.items():
        codes[name] = main([*argv, *(["--force"] if has_force else [])])
        err = capsys.readouterr().err
        assert codes[name] in (Exit.OK, Exit.USER_ERROR), (name, codes[name], err[-3000:])
        if codes[name] == Exit.USER_ERROR:
            assert "zz-users-" in err, (name, err[-3000:])
        changed = [str(p.relative_to(out)) for p, digest in planted.items()
                   if not p.is_file() or hashlib.sha256(p.read_bytes()).hexdigest() != digest]
        assert not changed, f"`{name}` deleted or changed a user's files: {changed}"
    return codes


def test_no_command_touches_a_users_file_anywhere_in_its_output_trees(tmp_path, book_lines, capsys):
    todo = commands(tmp_path, book_lines)
    for name, (argv, _) in todo.items():
        assert main(argv) == Exit.OK, (name, capsys.readouterr().err[-3000:])
    capsys.readouterr()
    out = tmp_path / "out"
    folders = sorted(p for p in out.rglob("*") if p.is_dir())
    assert {"run/data", "run/train/ray", "run/train/model", "run/eval/test/embeddings", "run/eval/test/search",
            "embedded", "mined", "onnx"} <= {str(p.relative_to(out)) for p in folders}
    # first the deepest folders alone (a command that takes a whole subfolder for its own is found out
    # there), then every folder
    leaves = [f for f in folders if not any(p.is_dir() for p in f.iterdir())]
    planted = plant(out, leaves, "leaf")
    assert len(planted) > 15  # Ray's checkpoints, each language's blocks and each pair's results among them
    rerun_all(todo, out, planted, capsys)
    planted |= plant(out, [out, *folders], "any")
    codes = rerun_all(todo, out, planted, capsys)
    assert set(codes.values()) == {Exit.USER_ERROR}  # a user's file in each tree: each command refused
