"""No command deletes or changes a user's file anywhere in the output trees it writes, locally and in a bucket.

The trees are generated, not listed: every command that writes a folder runs once, then a user's file is
put in every folder of every tree it wrote (its subfolders too: Ray's checkpoints, each language's
embeddings, the search results, the tune trials, the teacher's embeddings beside the dataset, the staging left
by nobody), and every command runs again with `--force` where it has one. Each either finishes or refuses
(exit 2, naming a file of the user's); afterwards every user's file is there, byte for byte. Real Bible text, a
tiny model. In the bucket, every output (the run dir, `embed -o`, `mine.output_dir`) is a prefix of the S3 test
server and each "folder" a prefix there; `export` writes a local folder only, so it is in the local variant
alone. The commands are the CLI's own: one that writes no tree says why in NO_TREE, checked against the parser.

Slow (a Beam job, Ray training and a one-trial search, evaluation, embedding and mining: once for the local
tests, which each get a copy of what that build left at the same paths, and once in the bucket): the rule is
about the trees the commands really write, which no unit test of one check generates.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest

from core import storage
from core.errors import Exit
from orchestration.cli import main
from tests.support.corpus import LANGS, SMALL_BOOKS, write_corpus, write_lines
from tests.support.runs import TINY, store_uri


def commands(tmp_path, out: str, book_lines) -> dict[str, tuple[list[str], bool]]:
    """{name: (argv, whether it has --force)} of every command that writes an output tree under `out` (a
    local folder or a URI)."""
    corpus = write_corpus(tmp_path / "corpus", book_lines, SMALL_BOOKS)
    texts = book_lines({"fr": "l", "en": "k"}, [8])
    write_lines(tmp_path / "corpus" / "ruth.fr", texts["fr"])
    write_lines(tmp_path / "corpus" / "ruth.en", texts["en"][::-1])
    run = storage.join(out, "run")
    common = [
        f"run_dir={run}",
        f"tracking.uri={store_uri(tmp_path)}",
        f"prepare.sources=[{{kind: text, path: '{corpus}', languages: {LANGS}}}]",
        "prepare.split.dev_size=40",
        "prepare.split.test_size=40",
        "prepare.spm.vocab_size=1500",
        *TINY,
        "train.max_steps=10",
        # the teacher's embeddings: a tree of their own beside the dataset's shards (core.teacher)
        "model.teacher=use",
        "model.distill_weight=0.1",
        "model.nmt_weight=1.0",  # decoders trained: `translate` has a target
    ]
    model = storage.join(run, "train", "model")
    space = tmp_path / "space.yaml"
    space.write_text("num_samples: 1\nscheduler: fifo\nspace:\n  train.lr: {choice: [0.01]}\n")
    todo = {
        "prepare": (["prepare", *common], True),
        "train": (["train", *common], True),
        "evaluate": (["evaluate", *common], True),
        "run": (["run", *common], False),  # every stage up to date by then: its lock, checks and the champion
        "tune": (["tune", *common, "--space", str(space)], False),  # one trial; a rerun restores the search
        "embed": (
            [
                "embed",
                *common,
                "-l",
                "fr",
                "--model",
                model,
                "-i",
                str(tmp_path / "corpus" / "ruth.fr"),
                "-o",
                storage.join(out, "embedded"),
            ],
            True,
        ),
        "translate": (  # the corpus job: blocks, their records and a manifest in a folder of its own
            [
                "translate",
                *common,
                "--model",
                model,
                "-l",
                "fr",
                "-t",
                "en",
                "-i",
                str(tmp_path / "corpus" / "ruth.fr"),
                "-o",
                storage.join(out, "translated"),
                "--block-rows",
                "40",
            ],
            True,
        ),
        "mine": (
            [
                "mine",
                *common,
                f"mine.model={model}",
                f"mine.output_dir={storage.join(out, 'mined')}",
                "mine.threshold=1.05",
                f"mine.inputs=[{{lang: fr, path: '{tmp_path / 'corpus' / 'ruth.fr'}'}}, "
                f"{{lang: en, path: '{tmp_path / 'corpus' / 'ruth.en'}'}}]",
            ],
            False,
        ),
    }
    if not storage.is_uri(out):
        todo["export"] = (["export", *common, "--model", model, "-o", storage.join(out, "onnx")], False)
    assert set(todo) <= set(TREES), set(todo) - set(TREES)
    return todo


# Every command, generated from the CLI's parser, is here or below with why it writes no tree: a new command
# fails `test_every_command_writes_a_tree_of_this_test_or_says_why_not` until it is put in one of them.
TREES = ("prepare", "train", "evaluate", "run", "tune", "embed", "translate", "mine", "export")
NO_TREE = {
    "compare": "--plot replaces only a PNG that compare wrote (its Software field); lifecycle/test_compare.py",
    "upgrade-model": "converts a model folder in place through the output layer (a link or a user's file there is "
    "refused, the new folder staged and swapped in); test_model_upgrade.py",
    "serve": "writes its own mkdtemp folder only, removed on exit; tests/orchestration/serve/test_server.py",
    "search": "prints its neighbours; writes nothing",
    "config": "prints the resolved configuration; writes nothing",
    "card": "prints a model's card; writes nothing (`run` registers it in the tracking store)",
    "get-catalogs": "fetches with apt-get: packages built with dpkg-deb stand in, and a user's file at every level "
    "of its tree is refused before any download; tests/pipelines/test_debian_catalogs.py",
}


def folders(out: str) -> list[str]:
    """Every folder (a prefix, in a bucket) under `out`, relative to it; "" for `out` itself."""
    files = set(storage.files(out))
    return [""] + [entry for entry in storage.entries(out) if entry not in files]


def plant(out: str, where: list[str], mark: str) -> dict[str, str]:
    """A user's file in each folder of `where` (relative to `out`); {its location: sha256}."""
    planted = {}
    for i, folder in enumerate(where):
        location = storage.join(out, *([folder] if folder else []), f"zz-users-{mark}-{i}.txt")
        storage.write_bytes(location, f"a user's file in {folder or '.'}: never delete me\n".encode())
        planted[location] = storage.sha256(location)
    return planted


def finished(name: str, retrained: bool = False) -> tuple[Exit, ...]:
    """The exit codes of a command that did its work: `run` registers the champion once, then has nothing to do;
    after `train --force` made a new model file (`retrained`), `run` registers it and may not promote it."""
    if name != "run":
        return (Exit.OK,)
    return (Exit.OK, Exit.NOTHING_TO_DO, *((Exit.NOT_PROMOTED,) if retrained else ()))


def rerun_all(todo, planted: dict[str, str], capsys) -> dict[str, int]:
    """Every command again (with --force where it has one); each finishes or refuses naming a user's file,
    and no user's file changes. {name: exit code}. `train --force` makes a new model file where nothing
    refuses it: `run` then registers that model (`finished(retrained=True)`)."""
    codes = {}
    for name, (argv, has_force) in todo.items():
        codes[name] = main([*argv, *(["--force"] if has_force else [])])
        err = capsys.readouterr().err
        assert codes[name] in (*finished(name, retrained=True), Exit.USER_ERROR), (name, codes[name], err[-3000:])
        if codes[name] == Exit.USER_ERROR:
            assert "zz-users-" in err, (name, err[-3000:])
        changed = [
            location
            for location, digest in planted.items()
            if not storage.exists(location) or storage.sha256(location) != digest
        ]
        assert not changed, f"`{name}` deleted or changed a user's files: {changed}"
    return codes


@dataclass(frozen=True)
class LocalTrees:
    """The local trees, built once for this module's local tests (`local_trees`): `work` holds everything the
    commands read and wrote (the corpus, the space, the MLflow store, `out/`), `pristine` a copy of it as the
    build left it, `todo` the commands."""

    work: Path
    pristine: Path
    todo: dict[str, tuple[list[str], bool]]

    def fresh(self) -> str:
        """`work` as the build left it, at the same paths (every config, record and MLflow run names them);
        the output folder `out`. The MLflow store is copied into its file in place (SQLite's backup), where
        this process's MLflow keeps connections open; the folders this process saw as it checked an output
        (`core.anchor`, by path) are forgotten, the copy being other folders at those paths."""
        from core import anchor

        for entry in self.work.iterdir():
            if entry.name == STORE:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        for entry in self.pristine.iterdir():
            if entry.name == STORE:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.copytree(entry, self.work / entry.name, symlinks=True)
            else:
                shutil.copy2(entry, self.work / entry.name, follow_symlinks=False)
        with contextlib.closing(sqlite3.connect(self.pristine / STORE)) as source:
            with contextlib.closing(sqlite3.connect(self.work / STORE)) as store:
                source.backup(store)
        for folder in [f for f in anchor._SEEN if f.startswith(f"{self.work}{os.sep}")]:
            anchor._SEEN.pop(folder, None)
        return str(self.work / "out")


STORE = "mlflow.db"  # the trees' MLflow store (`store_uri`), in the work folder


@pytest.fixture(scope="module")
def local_trees(tmp_path_factory, book_lines) -> LocalTrees:
    """Every command run once into local trees; the tests that change them each get a fresh copy (their group
    keeps them on one test process, so the build runs once)."""
    base = tmp_path_factory.mktemp("trees")
    work = base / "work"
    work.mkdir()
    todo = commands(work, str(work / "out"), book_lines)
    build(todo)
    shutil.copytree(work, base / "pristine", symlinks=True)
    return LocalTrees(work, base / "pristine", todo)


@pytest.mark.beam
@pytest.mark.ray
@pytest.mark.xdist_group("trees")
def test_no_command_touches_a_users_file_anywhere_in_its_output_trees(local_trees, tmp_path, capsys):
    """Also: a snapshot of every tree the way `cp -al`, rsnapshot and `rsync --link-dest` keep one (a hard link
    to every file) keeps its bytes through every command's rerun with --force: no write opens an inode that is
    there (STYLE.md, "Data safety")."""
    check_trees(local_trees.fresh(), local_trees.todo, capsys, snapshot=tmp_path / "snapshot")


@pytest.mark.beam
@pytest.mark.ray
def test_no_command_touches_a_users_object_anywhere_in_its_output_prefixes_in_a_bucket(
    s3_bucket, local_ray, tmp_path, book_lines, capsys, monkeypatch
):
    """Also what a test of its own asserted of prepare, train and evaluate with the run dir in a bucket: each
    stage's files land there, nothing local is named after the URI, and a rerun finds its work done."""
    monkeypatch.chdir(tmp_path)  # a URI taken for a local path would show up here as `s3:/...`
    out = f"{s3_bucket}/out"
    todo = commands(tmp_path, out, book_lines)
    build(todo)
    in_the_bucket(todo, out, tmp_path, capsys.readouterr().out)
    check_trees(out, todo, capsys)


def in_the_bucket(todo, out: str, tmp_path, printed: str) -> None:
    run = storage.join(out, "run")
    assert f"model: {run}/train/model" in printed
    found = storage.files(run)
    assert "data/manifest.json" in found and "data/spm.model" not in found  # the manifest names its attempt's
    assert {
        "train/run.json",
        "train/config.yaml",
        "train/model/model.safetensors",
        "train/model/spm.model",
        "train/model/lineage.json",
        "train/workers/rank-0.json",
    } <= set(found)
    folder = storage.read_json(storage.join(run, "train/run.json"))["ray_dir"]  # Ray's, of the lease holder's own
    assert folder.startswith("ray-") and {f.split("/")[1] for f in found if f.startswith("train/ray")} == {folder}
    assert any(f.startswith(f"train/{folder}/checkpoint_") and f.endswith("/state.pt") for f in found)
    assert {"eval/test/metrics.json", "eval/test/state.json", "eval/test/embeddings/manifest.json"} <= set(found)
    # nothing local but the inputs, the SQLite tracking store and its artifact folder: no `s3:` folder
    assert {p.name for p in tmp_path.iterdir()} <= {"corpus", "space.yaml", "mlflow.db", "mlartifacts"}
    # a rerun reads its states from the bucket: it trains and evaluates nothing
    assert main(todo["train"][0]) == Exit.OK and main(todo["evaluate"][0]) == Exit.OK
    assert storage.files(run) == found
    assert (
        storage.sha256(f"{run}/train/model/model.safetensors")
        == storage.read_json(f"{run}/train/model/lineage.json")["model_sha256"]
    )


def link_snapshot(out: Path, to: Path) -> dict[Path, bytes]:
    """A hard link under `to` to every file under `out`, as `cp -al` makes one; {link: its bytes}."""
    kept = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file() and not p.is_symlink()):
        link = to / path.relative_to(out)
        link.parent.mkdir(parents=True, exist_ok=True)
        os.link(path, link)
        kept[link] = link.read_bytes()
    return kept


def build(todo) -> None:
    """Every command once, each finishing (its stderr, captured, shows why one did not)."""
    for name, (argv, _) in todo.items():
        code = main(argv)
        assert code in finished(name), (name, code)


def check_trees(out: str, todo, capsys, snapshot: Path | None = None) -> None:
    """The trees `build` wrote under `out`: every folder found, then (with `snapshot`, local) every command
    again beside a hard-linked snapshot, then a user's file in every leaf and then in every folder, each time
    every command again."""
    capsys.readouterr()
    found = folders(out)
    ray_dir = storage.read_json(storage.join(out, "run/train/run.json"))["ray_dir"]  # `ray`, or the lease holder's
    assert {
        "run/data",
        f"run/train/{ray_dir}",
        "run/train/model",
        "run/eval/test/embeddings",
        "run/eval/test/search",
        "run/tune/trials",
        "embedded",
        "translated",
        "mined",
    } <= set(found), found
    # first the deepest folders alone (a command that takes a whole subfolder for its own is found out
    # there), then every folder
    leaves = [f for f in found if f and not any(g.startswith(f + "/") for g in found)]
    if snapshot is not None:  # every command again, each finishing: then every snapshot file has its bytes
        kept = link_snapshot(Path(out), snapshot)
        assert len(kept) > 50 and any(p.name == "metrics.json" for p in kept), len(kept)
        codes = rerun_all(todo, {}, capsys)
        assert set(codes.values()) <= {Exit.OK, Exit.NOTHING_TO_DO, Exit.NOT_PROMOTED}, codes
        # Ray Tune's own storage (`run/tune/ray/`: its experiment state, each trial's results) is rewritten in
        # place by Ray when a search is restored; a known limit (docs/reliability.md, "Known limits")
        changed = sorted(
            str(p.relative_to(snapshot))
            for p, data in kept.items()
            if p.read_bytes() != data and not str(p.relative_to(snapshot)).startswith("run/tune/ray/")
        )
        assert not changed, f"a rerun with --force wrote into files a hard-linked snapshot shares: {changed}"
    planted = plant(out, leaves, "leaf")
    assert len(planted) > 15  # Ray's checkpoints, each language's blocks and each pair's results among them
    rerun_all(todo, planted, capsys)
    planted |= plant(out, found, "any")
    codes = rerun_all(todo, planted, capsys)
    assert set(codes.values()) == {Exit.USER_ERROR}  # a user's file in each tree: each command refused


def test_every_command_writes_a_tree_of_this_test_or_says_why_not():
    from orchestration.cli import parser

    (sub,) = [a for a in parser()._actions if a.dest == "command"]
    assert set(sub.choices) == set(TREES) | set(NO_TREE), set(sub.choices) ^ (set(TREES) | set(NO_TREE))
    assert not set(TREES) & set(NO_TREE)


SECRET = b"a user's file outside every output tree: never read, written or deleted through a link\n"
LINKED = ("manifest.json", "config.yaml", "model.safetensors", "spm.model", "state.json", "run.json")
LINKED_DIRS = ("model", "embeddings", "search")


@pytest.mark.beam
@pytest.mark.ray
@pytest.mark.xdist_group("trees")
def test_no_command_reads_writes_or_deletes_through_a_link_in_its_output_trees(local_trees, tmp_path, capsys):
    """The trees of `test_no_command_touches_a_users_file_anywhere_in_its_output_trees` (a fresh copy of the
    module's one build, `local_trees`), then links planted in two passes, each followed by every command again
    (with --force where it has one): first each file of the names every reader opens first (LINKED) and each
    folder of LINKED_DIRS moved outside and replaced by a link to it, which a reader or writer that followed
    links would take for its own; then in every folder a link to a user's file, to a user's folder and a
    dangling one. Each command finishes or refuses naming the links (exit 2), and nothing outside the trees
    changes (core/boundary.py). Local only: a bucket has no links."""
    out = Path(local_trees.fresh())
    todo = local_trees.todo
    capsys.readouterr()
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.txt").write_bytes(SECRET)
    (outside / "dir" / "secret.txt").write_bytes(SECRET)
    moved = outside / "moved"
    moved.mkdir()
    found = folders(str(out))
    linked = [f for f in found if f.rsplit("/", 1)[-1] in LINKED_DIRS]
    linked += [
        f
        for f in storage.files(str(out))
        if f.rsplit("/", 1)[-1] in LINKED and not any(f.startswith(d + "/") for d in linked)
    ]
    for i, relative in enumerate(linked):
        copy = moved / f"{i}-{relative.rsplit('/', 1)[-1]}"
        (out / relative).rename(copy)
        (out / relative).symlink_to(copy)
    assert len(linked) > 8, linked
    rerun_beside_links(todo, outside, capsys)
    for i, folder in enumerate(f for f in found if f not in linked):
        here = out / folder
        (here / f"zz-link-file-{i}").symlink_to(outside / "secret.txt")
        (here / f"zz-link-dir-{i}").symlink_to(outside / "dir")
        (here / f"zz-link-dangling-{i}").symlink_to(outside / "missing")
    rerun_beside_links(todo, outside, capsys)


def rerun_beside_links(todo, outside, capsys) -> None:
    """Every command again; each finishes or refuses naming a link, and no file under `outside` changes."""
    before = {str(p): p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    for name, (argv, has_force) in todo.items():
        code = main([*argv, *(["--force"] if has_force else [])])
        err = capsys.readouterr().err
        assert code in (*finished(name), Exit.USER_ERROR), (name, code, err[-3000:])
        if code == Exit.USER_ERROR:
            assert "holds symbolic links" in err, (name, err[-3000:])  # the links planted, not another refusal
        after = {str(p): p.read_bytes() for p in outside.rglob("*") if p.is_file()}
        assert after == before, f"`{name}` wrote or deleted outside its output trees, through a link"
