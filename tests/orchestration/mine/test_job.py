"""`interlingua mine` on real Bible text, BUCC's protocol: true translations hidden among distractors."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from orchestration.adapters import tracking
from orchestration.cli import main
from orchestration.config import load_config
from orchestration.mine import MineError
from orchestration.mine.job import mine
from tests.support.corpus import write_lines
from tests.support.runs import store_uri

TRUE_BOOKS = [8, 32]  # Ruth, Jonah: 133 verses in both languages
FR_ONLY, EN_ONLY = [17], [25]  # Esther in French, Lamentations in English: no translation on the other side


@pytest.fixture
def bucc(tmp_path, book_lines):
    """fr and en inputs (true pairs shuffled among distractors) and the gold file of the true pairs."""
    true = book_lines({"fr": "l", "en": "k"}, TRUE_BOOKS)
    fr = true["fr"] + book_lines({"fr": "l"}, FR_ONLY)["fr"]
    en = book_lines({"en": "k"}, EN_ONLY)["en"] + true["en"][::-1]
    write_lines(tmp_path / "fr.txt", fr)
    write_lines(tmp_path / "en.txt", en)
    write_lines(tmp_path / "gold.tsv", [f"{f}\t{e}" for f, e in zip(true["fr"], true["en"])])
    return tmp_path, len(true["fr"])


def bucc_config(folder, *overrides):
    return load_config(
        None,
        [
            f"run_dir={folder / 'run'}",
            f"tracking.uri={store_uri(folder)}",
            "mine.model=use",
            f"mine.inputs=[{{lang: fr, path: '{folder / 'fr.txt'}'}}, {{lang: en, path: '{folder / 'en.txt'}'}}]",
            *overrides,
        ],
    )


def test_mining_finds_the_hidden_translations_with_a_calibrated_threshold(bucc, local_ray):
    folder, true_pairs = bucc
    config = bucc_config(folder, f"mine.gold={{path: '{folder / 'gold.tsv'}'}}")
    result = mine(config)
    (pair,) = result.pairs
    assert pair.name == "fr-en" and pair.index == "flat" and pair.curve is not None
    # USE on real verses: most of the 133 true pairs found, few distractor pairs kept
    assert pair.scores["f1"] > 0.8 and pair.scores["precision"] > 0.8, pair.scores
    table = pq.read_table(result.out_dir / "pairs-fr-en.parquet")
    assert table.column_names == ["fr_text", "en_text", "score", "fwd_rank", "bwd_rank"]
    assert len(table) == len(pair.kept) and min(table["score"].to_pylist()) >= pair.threshold
    manifest = json.loads((result.out_dir / "manifest.json").read_text())
    entry = manifest["pairs"]["fr-en"]
    assert entry["rows"] == len(table) and entry["gold"] == pair.scores
    assert manifest["inputs"]["fr"]["read"] == true_pairs + 167 and manifest["inputs"]["en"]["read"] == true_pairs + 154
    accounted = entry["rows"] + sum(entry["dropped"].values())
    assert accounted == entry["candidates"]  # every candidate kept or dropped under a reason
    run = tracking.get_run(config.tracking.uri, result.run_id)
    assert run.data.tags["interlingua.stage"] == "mine" and run.data.metrics["mine/fr-en/f1"] == pair.scores["f1"]


def test_a_fixed_threshold_needs_no_gold_and_bad_input_is_refused(bucc, local_ray, capsys):
    folder, _ = bucc
    args = [
        "mine",
        f"run_dir={folder / 'run'}",
        f"tracking.uri={store_uri(folder)}",
        "mine.model=use",
        f"mine.inputs=[{{lang: fr, path: '{folder / 'fr.txt'}'}}, {{lang: en, path: '{folder / 'en.txt'}'}}]",
        "mine.threshold=1.2",
    ]
    assert main(args) == 0
    assert "fr-en:" in capsys.readouterr().out
    with pytest.raises(MineError, match="no file matches"):
        mine(
            bucc_config(
                folder,
                "mine.threshold=1.1",
                f"mine.inputs=[{{lang: fr, path: '{folder / 'nope*.txt'}'}}, {{lang: en, path: x}}]",
            )
        )
    (folder / "bad.txt").write_bytes(b"caf\xe9\n")
    with pytest.raises(MineError, match=r"bad.txt:1: not valid UTF-8"):
        mine(
            bucc_config(
                folder,
                "mine.threshold=1.1",
                f"mine.inputs=[{{lang: fr, path: '{folder / 'bad.txt'}'}}, {{lang: en, path: '{folder / 'en.txt'}'}}]",
            )
        )
    assert main(["mine", "mine.inputs=[{lang: fr, path: a}, {lang: en, path: b}]"]) == 2
    assert "mine.threshold or mine.gold" in capsys.readouterr().err


def test_a_model_directory_embeds_with_the_corpus_job_and_a_rerun_reuses_its_blocks(bucc, small_dataset, local_ray):
    from orchestration.embedding.embedder import SentenceEmbedder
    from tests.support.runs import untrained_model_dir

    folder, _ = bucc
    model = untrained_model_dir(small_dataset, folder / "model")
    config = bucc_config(folder, f"mine.model={model}", "mine.threshold=1.0")
    result = mine(config)
    blocks = result.out_dir / "embeddings" / "fr" / "blocks"
    manifest = json.loads((blocks / "manifest.json").read_text())
    # the distinct French sentences, embedded by the Ray Data job as the model embeds them in-process
    sentences = pq.read_table(result.out_dir / "embeddings" / "fr" / "sentences.parquet")["text"].to_pylist()
    assert (
        manifest["rows"]
        == len(sentences)
        == json.loads((result.out_dir / "manifest.json").read_text())["inputs"]["fr"]["distinct"]
    )
    stored = np.concatenate([np.load(blocks / "fr" / f"{b['name']}.npy") for b in manifest["blocks"]])
    np.testing.assert_allclose(stored, SentenceEmbedder.load(model).embed(sentences, "fr"), atol=1e-5)
    marker = blocks / "part-00000.json"
    written = marker.stat().st_mtime_ns
    again = mine(config)
    assert marker.stat().st_mtime_ns == written  # the rerun kept the finished block
    assert len(again.pairs[0].kept) == len(result.pairs[0].kept)


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("interlingua")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def mine_args(folder, model, *overrides):
    return [
        "mine",
        f"run_dir={folder / 'run'}",
        f"tracking.uri={store_uri(folder)}",
        f"mine.model={model}",
        "prepare.spm.vocab_size=2000",
        f"mine.inputs=[{{lang: fr, path: '{folder / 'fr.txt'}'}}, {{lang: en, path: '{folder / 'en.txt'}'}}]",
        *overrides,
    ]


def test_a_k_larger_than_the_smaller_side_is_refused_before_embedding(bucc, small_dataset, capsys):
    from tests.support.runs import untrained_model_dir

    folder, _ = bucc
    model = untrained_model_dir(small_dataset, folder / "model")
    assert main(mine_args(folder, model, "mine.threshold=1.1", "mine.k=1000000")) == 2
    line = error_line(capsys)
    # 287 English verses (Lamentations, Ruth, Jonah), 300 French ones (Ruth, Jonah, Esther), all distinct
    assert "mine.k=1000000 is larger than the smaller side (en: 287 distinct sentences; fr 300, en 287)" in line
    assert "set mine.k to at most 287" in line
    assert not (folder / "run" / "mine" / "embeddings").exists()  # refused before any sentence was embedded


def test_a_gold_split_whose_shard_changed_is_refused_naming_it_before_embedding(bucc, small_dataset, capsys):
    import shutil

    from tests.support.runs import rotate_french, untrained_model_dir

    folder, _ = bucc
    data = folder / "data"
    shutil.copytree(small_dataset.data_dir, data)
    shard = rotate_french(data)  # manifest.json as it was
    model = untrained_model_dir(small_dataset, folder / "model")
    assert main(mine_args(folder, model, f"dataset_dir={data}", "mine.gold={split: test}")) == 2
    line = error_line(capsys)
    assert f"{shard}: sha256" in line and "differs" in line
    assert not (folder / "run" / "mine" / "embeddings").exists()  # refused before any sentence was embedded


def _parquet_without_the_column(folder):
    import pyarrow as pa

    pq.write_table(pa.table({"sentence": (folder / "fr.txt").read_text().splitlines()}), folder / "fr.parquet")
    return [
        f"mine.inputs=[{{lang: fr, path: '{folder / 'fr.parquet'}', format: parquet}}, "
        f"{{lang: en, path: '{folder / 'en.txt'}'}}]",
        "mine.threshold=1.1",
    ], "has no column 'text'"


def _empty_input(folder):
    (folder / "empty.txt").write_text("")
    return [
        f"mine.inputs=[{{lang: fr, path: '{folder / 'empty.txt'}'}}, {{lang: en, path: '{folder / 'en.txt'}'}}]",
        "mine.threshold=1.1",
    ], "empty.txt: no sentence to mine"


def _missing_gold(folder):
    return [f"mine.gold={{path: '{folder / 'missing.tsv'}'}}"], "mine.gold.path: " + str(folder / "missing.tsv")


def _output_under_a_file(folder):
    (folder / "notes.txt").write_text("a user's file\n")
    return [f"mine.output_dir={folder / 'notes.txt' / 'mined'}", "mine.threshold=1.1"], "mine.output_dir: cannot write"


def _output_holding_an_input(folder):
    """The probe's case: mine.output_dir holds the user's own `embeddings/fr/sentences.parquet`, which is also
    mine's French input (the name mine gives the sentences it embeds): the user's table is never overwritten."""
    import pyarrow as pa

    table = folder / "mined" / "embeddings" / "fr" / "sentences.parquet"
    table.parent.mkdir(parents=True)
    pq.write_table(pa.table({"text": (folder / "fr.txt").read_text().splitlines()}), table)
    return [
        f"mine.output_dir={folder / 'mined'}",
        f"mine.inputs=[{{lang: fr, path: '{table}', format: parquet}}, {{lang: en, path: '{folder / 'en.txt'}'}}]",
        "mine.threshold=1.1",
    ], "embeddings/fr/sentences.parquet"


CASES = [_empty_input, _missing_gold, _parquet_without_the_column, _output_under_a_file, _output_holding_an_input]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_and_exit_2_before_any_model_is_loaded(case, bucc, monkeypatch, capsys):
    from orchestration.mine import job

    def no_work(*args, **kwargs):
        raise AssertionError("the model was loaded before the inputs were checked")

    monkeypatch.setattr(job, "load_encoder", no_work)
    folder, _ = bucc
    overrides, expected = case(folder)
    args = [
        "mine",
        f"run_dir={folder / 'run'}",
        f"tracking.uri={store_uri(folder)}",
        "mine.model=use",
        f"mine.inputs=[{{lang: fr, path: '{folder / 'fr.txt'}'}}, {{lang: en, path: '{folder / 'en.txt'}'}}]",
        *overrides,
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("interlingua mine: error: ") and expected in err, err
    assert not (folder / "run" / "mine").exists()
    if case is _output_holding_an_input:
        table = folder / "mined" / "embeddings" / "fr" / "sentences.parquet"
        assert pq.read_table(table)["text"].to_pylist() == (folder / "fr.txt").read_text().splitlines()
        assert sorted(p.name for p in (folder / "mined").rglob("*")) == ["embeddings", "fr", "sentences.parquet"]


def test_an_input_that_is_mines_own_earlier_output_is_refused_as_an_overlap(tmp_path):
    """An input inside the output folder that the product wrote (recorded as its own) is still never written
    over: the output and the inputs are compared by resolved identity before any work."""
    from core import ownership
    from core.output import OverlapError
    from orchestration.mine.report import output_folder

    out = tmp_path / "mined"
    table = out / "embeddings" / "fr" / "sentences.parquet"
    table.parent.mkdir(parents=True)
    table.write_bytes(b"PAR1")
    ownership.begin_writes(str(out), ["embeddings/fr/sentences.parquet"])
    folder = output_folder(str(out))
    folder.check_replaceable()  # the product's own, by its record
    with pytest.raises(OverlapError, match="holds the input .*sentences.parquet"):
        folder.check_apart([(str(table), "mine.inputs (fr)")])
    (tmp_path / "link").symlink_to(out)
    with pytest.raises(OverlapError, match="is the input"):
        folder.check_apart([(str(tmp_path / "link"), "mine.gold.path")])
    with pytest.raises(OverlapError, match="lies inside the input"):
        output_folder(str(out / "sub")).check_apart([(str(out), "--model")])
    folder.check_apart([(str(tmp_path / "fr.txt"), "mine.inputs (fr)")])  # beside it: fine


@pytest.mark.parametrize("held", ["", "pid 4242 on node-1\n", '{"holder": "pid 7 on h", "token": "ab"}', "notes\n"])
def test_a_lock_that_a_killed_mine_left_in_its_output_is_its_own_and_a_users_file_there_is_not(tmp_path, held):
    """`kill -9` of mine leaves `embeddings/<lang>/.blocks.lock` (the OS drops the lock, not its file): the
    rerun takes it for the product's, by what it holds; a user's file of that name is still refused."""
    from core.ownership import ForeignDataError
    from orchestration.mine.report import output_folder

    lock = tmp_path / "mined" / "embeddings" / "fr" / ".blocks.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text(held)
    folder = output_folder(str(tmp_path / "mined"))
    if held == "notes\n":
        with pytest.raises(ForeignDataError, match=".blocks.lock"):
            folder.check_replaceable()
    else:
        assert "embeddings/fr/.blocks.lock" in folder.check_replaceable()
