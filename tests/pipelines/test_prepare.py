"""The whole Beam job on real Bible text: accounting, splits, output format, reruns, runners."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import sentencepiece as spm

from core import dataset, dataset_writer
from orchestration.config import load_config
from pipelines import tokenizer
from pipelines.prepare import run_prepare
from pipelines.runners import pipeline_options
from pipelines.split import CONTAMINATED, HeldOutError
from tests.support.corpus import disk_full_at_second_shard, small_config, write_lines

pytestmark = pytest.mark.beam
LANGS = ["en", "fr", "es", "ru", "ar", "zh"]


def prepare(config, **kwargs):
    kwargs.setdefault("options", pipeline_options([]))
    return run_prepare(config.prepare, config.data_dir, resolved_config=config.to_dict(), **kwargs)


def file_hashes(manifest: dataset.DatasetManifest) -> dict[str, str]:
    manifest = manifest.dump()
    out = {f["path"]: f["sha256"] for s in manifest["splits"].values() for f in s["files"]}
    out["spm.model"] = manifest["spm"]["sha256"]
    return out


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    config = small_config(tmp_path_factory.mktemp("prep"))
    result = prepare(config)
    return config, result


def test_counts_add_up_and_match_the_files(prepared):
    config, result = prepared
    m = result.manifest.dump()
    t = m["counts"]["tuples"]
    assert t["in"] == 231  # every verse of the seven books
    assert t["in"] == sum(t["out"].values()) + sum(t["dropped"].values())
    for lang in LANGS:
        s = m["counts"]["sentences"][lang]
        assert s["in"] == sum(s["out"].values()) + sum(s["dropped"].values()), lang
    for split in dataset.SPLITS:
        table = dataset.read_split(config.data_dir, split)
        assert table.num_rows == t["out"][split] == m["splits"][split]["tuples"]
        for lang in LANGS:
            present = table.num_rows - table.column(f"{lang}_text").null_count
            assert present == m["counts"]["sentences"][lang]["out"][split]
    assert m["splits"]["dev"]["tuples"] == 40 and m["splits"]["test"]["tuples"] == 40
    # real noise of these books, each counted under its reason
    assert m["counts"]["sentences"]["ar"]["dropped"]["empty"] >= 1  # 3 John 1:1 is ":"
    assert m["counts"]["sentences"]["en"]["dropped"]["too_long"] >= 1
    assert m["counts"]["normalized"]["fr"]["inline_reference"] >= 1


def test_held_out_splits_have_no_repeated_sentence_and_train_is_decontaminated(prepared):
    config, _ = prepared
    splits = {s: dataset.read_split(config.data_dir, s).to_pylist() for s in dataset.SPLITS}
    held_out = splits["dev"] + splits["test"]
    for lang in LANGS:
        texts = [r[f"{lang}_text"] for r in held_out if r[f"{lang}_text"] is not None]
        assert len(texts) == len(set(texts)), f"repeated {lang} sentence in dev/test"
        train = {r[f"{lang}_text"] for r in splits["train"]}
        assert not train & set(texts), f"{lang} training sentence also in dev/test"
    # held-out tuples are complete (every language), so every pair is measured on the same sentences
    assert all(r[f"{lang}_text"] is not None for r in held_out for lang in LANGS)
    keys = [r["key"] for s in splits.values() for r in s]
    assert len(keys) == len(set(keys))


def test_parquet_schema_tokens_and_spm_model(prepared):
    config, result = prepared
    files = dataset.split_files(config.data_dir, "train")
    assert [f.name for f in files] == [f"part-0000{i}-of-00003.parquet" for i in range(3)]
    assert pq.read_schema(files[0]).remove_metadata() == dataset_writer.schema(LANGS)
    sp = spm.SentencePieceProcessor(model_file=str(Path(config.data_dir) / dataset.SPM_MODEL))
    assert sp.get_piece_size() == result.manifest.dump()["spm"]["vocab_size"] <= 2000
    rows = dataset.read_split(config.data_dir, "dev").to_pylist()
    pairs = [(r[f"{lang}_text"], r[f"{lang}_ids"], r[f"{lang}_len"]) for r in rows for lang in LANGS]
    assert all(len(ids) == n > 0 and dataset.BOS_ID not in ids for _, ids, n in pairs)
    alphabetic = [
        (text, ids) for r in rows for lang in LANGS[:5] for text, ids in [(r[f"{lang}_text"], r[f"{lang}_ids"])]
    ]
    assert sum(sp.decode(ids) == text for text, ids in alphabetic) >= 0.98 * len(alphabetic)
    # character_coverage (0.9995) leaves out the rarest characters of the whole sample:
    # in 231 verses those are Chinese characters seen once
    train_zh = [i for r in dataset.read_split(config.data_dir, "train").to_pylist() for i in r["zh_ids"] or []]
    assert train_zh.count(dataset.UNK_ID) < 0.02 * len(train_zh)
    written = yaml_config(Path(config.data_dir) / "config.yaml")
    assert written == config.to_dict() == result.manifest.dump()["config"]


def test_bpe_sample_follows_the_temperature_rates(prepared):
    """The sample: each training sentence drawn rates[lang] times in expectation, rates from the pool."""
    config, result = prepared
    sentences = result.manifest.dump()["counts"]["sentences"]
    pool = {lang: sum(b["out"].values()) + b["dropped"].get(CONTAMINATED, 0) for lang, b in sentences.items()}
    rates = tokenizer.sampling_rates(pool, config.prepare.spm)
    expected = sum(rates[lang] * b["out"]["train"] for lang, b in sentences.items())
    assert result.manifest.dump()["spm"]["sample_sentences"] == pytest.approx(expected, rel=0.03)


def yaml_config(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())


def test_rerun_is_a_no_op_and_forced_rerun_gives_identical_files(prepared, tmp_path):
    config, result = prepared
    stamp = (Path(config.data_dir) / dataset.MANIFEST).stat().st_mtime_ns
    again = prepare(config)
    assert again.skipped and again.manifest == result.manifest
    assert (Path(config.data_dir) / dataset.MANIFEST).stat().st_mtime_ns == stamp
    other = small_config(tmp_path)
    rebuilt = prepare(other, force=True)
    assert not rebuilt.skipped
    assert file_hashes(rebuilt.manifest) == file_hashes(result.manifest)
    assert rebuilt.manifest.dump()["fingerprint"] == result.manifest.dump()["fingerprint"]


def test_split_depends_on_the_seed_only(prepared, tmp_path):
    config, _ = prepared
    reseeded = small_config(tmp_path, "prepare.split.seed=7")
    prepare(reseeded)
    keys = lambda c: {r["key"] for r in dataset.read_split(c.data_dir, "dev").to_pylist()}  # noqa: E731
    assert keys(reseeded) != keys(config)
    assert len(keys(reseeded)) == 40


def test_portable_runner_gives_the_same_dataset(prepared, tmp_path):
    config, result = prepared
    portable = small_config(tmp_path)
    out = prepare(
        portable,
        options=pipeline_options(["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"]),
    )
    assert file_hashes(out.manifest) == file_hashes(result.manifest)


def test_two_processes_give_the_same_dataset(prepared, tmp_path):
    config, result = prepared
    out = prepare(small_config(tmp_path), options=pipeline_options([], workers=2))
    assert file_hashes(out.manifest) == file_hashes(result.manifest)


def test_crash_mid_write_keeps_the_previous_dataset(prepared, tmp_path, monkeypatch):
    config, result = prepared
    changed = small_config(Path(config.run_dir).parent, "prepare.spm.vocab_size=1500")
    assert changed.data_dir == config.data_dir
    real = disk_full_at_second_shard(monkeypatch)
    with pytest.raises(Exception, match="No space left on device"):
        prepare(changed)
    # the old dataset is whole and still the published one
    assert dataset.load_manifest(config.data_dir) == result.manifest
    assert file_hashes(dataset.load_manifest(config.data_dir)) == file_hashes(result.manifest)
    monkeypatch.setattr(dataset_writer, "write_shard", real)
    done = prepare(changed)
    assert done.manifest.dump()["spm"]["vocab_size"] <= 1500
    assert dataset.load_manifest(config.data_dir).dump()["fingerprint"] != result.manifest.dump()["fingerprint"]
    assert not list(Path(config.run_dir).glob(".data.partial-*"))


def test_a_crashed_first_run_leaves_no_dataset(tmp_path, monkeypatch):
    config = small_config(tmp_path)

    def failing(path, rows, languages):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dataset_writer, "write_shard", failing)
    with pytest.raises(Exception, match="No space left on device"):
        prepare(config)
    assert not Path(config.data_dir).exists()
    with pytest.raises(dataset.DatasetError, match="not a finished dataset"):
        dataset.load_manifest(config.data_dir)


@pytest.fixture
def bitexts(tmp_path, book_lines):
    """Two real bitexts, en-fr (Ruth) and en-es (Jonah), with repeats and a near-duplicate."""
    ruth = book_lines({"en": "k", "fr": "l"}, [8])
    jonah = book_lines({"en": "k", "es": "v"}, [32])
    for lang in ("en", "fr"):
        lines = ruth[lang] + ruth[lang][:5]  # five exact duplicate pairs
        write_lines(tmp_path / f"ruth.{lang}", lines)
    jonah["en"].append(jonah["en"][10].replace("the", "a", 1))  # a near-duplicate pair
    jonah["es"].append(jonah["es"][10])
    for lang in ("en", "es"):
        write_lines(tmp_path / f"jonah.{lang}", jonah[lang])
    return [
        f"prepare.sources=[{{kind: text, path: '{tmp_path}/ruth.{{lang}}', languages: [en, fr], name: ruth}},"
        f" {{kind: text, path: '{tmp_path}/jonah.{{lang}}', languages: [en, es], name: jonah}}]",
        f"run_dir={tmp_path / 'run'}",
        "prepare.split.dev_size=10",
        "prepare.split.test_size=10",
        "prepare.spm.vocab_size=1000",
    ]


def test_bitexts_give_tuples_with_some_languages(bitexts):
    with pytest.raises(HeldOutError, match="heldout_complete=false"):
        prepare(load_config(None, bitexts))
    config = load_config(None, bitexts + ["prepare.split.heldout_complete=false"])
    m = prepare(config).manifest.dump()
    assert m["languages"] == ["en", "fr", "es"]
    assert m["counts"]["tuples"]["in"] == 85 + 5 + 48 + 1
    assert m["counts"]["tuples"]["dropped"]["duplicate"] == 5
    assert "near_duplicate" not in m["counts"]["tuples"]["dropped"]
    rows = dataset.read_split(config.data_dir, "train").to_pylist()
    assert all((r["fr_text"] is None) != (r["es_text"] is None) for r in rows)
    assert all(r["en_text"] is not None for r in rows)

    near = load_config(
        None,
        bitexts
        + ["prepare.split.heldout_complete=false", "prepare.dedup.near_duplicates=true", "prepare.dedup.threshold=0.7"],
    )
    m = prepare(near, force=True).manifest.dump()
    assert m["counts"]["tuples"]["dropped"]["near_duplicate"] == 1


def test_bad_input_fails_before_any_work(tmp_path, bitexts):
    (tmp_path / "jonah.es").write_text("one line\n")
    config = load_config(None, bitexts)
    with pytest.raises(Exception, match=r"jonah.en: 49 lines, .*jonah.es: 1 lines"):
        prepare(config)
    assert not (tmp_path / "run").exists()  # nothing was staged


def test_held_out_larger_than_corpus_is_refused_early(tmp_path):
    config = small_config(tmp_path, "prepare.split.dev_size=200", "prepare.split.test_size=200")
    with pytest.raises(Exception, match="hold only 231 records"):
        prepare(config)


def test_catalogs_and_a_translation_memory_prepare_into_one_dataset(tmp_path, book_lines):
    """The machine's own catalogs of two packages (gettext, MO) beside a translation memory of real verses
    (TMX): N-way tuples of both, every skipped translation counted under its reason."""
    from lxml import etree

    verses = book_lines({"en-GB": "k", "fr-CA": "l", "es": "v"}, [31, 32])  # Obadiah and Jonah
    root = etree.Element("tmx", version="1.4")
    body = etree.SubElement(root, "body")
    for n in range(len(verses["es"])):
        tu = etree.SubElement(body, "tu")
        for tag, lines in verses.items():
            etree.SubElement(
                etree.SubElement(tu, "tuv", {"{http://www.w3.org/XML/1998/namespace}lang": tag}), "seg"
            ).text = lines[n]
    etree.ElementTree(root).write(str(tmp_path / "bible.tmx"), xml_declaration=True, encoding="UTF-8")
    config = load_config(
        None,
        [
            f"run_dir={tmp_path / 'run'}",
            "prepare.split.dev_size=20",
            "prepare.split.test_size=20",
            "prepare.spm.vocab_size=1500",
            "prepare.split.heldout_complete=false",
            "prepare.sources=[{kind: gettext, path: '/usr/share/locale/{lang}/LC_MESSAGES/*.mo',"
            " languages: [en, fr, es],"
            " catalogs: [Linux-PAM, apt], name: deb},"
            f" {{kind: tmx, path: '{tmp_path}/bible.tmx', languages: [en, fr, es], name: bible}}]",
        ],
    )
    m = prepare(config).manifest.dump()
    t = m["counts"]["tuples"]
    from pipelines.sources import plan_reads

    assert t["in"] == plan_reads(config.prepare).records > 400 + 69  # every message and every unit read
    fr = m["counts"]["sentences"]["fr"]
    assert fr["dropped"]["same_as_source"] > 0  # terms left in English, counted, not trained on
    assert fr["in"] == sum(fr["out"].values()) + sum(fr["dropped"].values())
    by_source = m["counts"]["sources"]
    assert set(by_source) == {"deb", "bible"} and by_source["bible"]["in"] == len(verses["es"])
    assert sum(sum(b["out"].values()) for b in by_source.values()) == sum(t["out"].values())
    rows = dataset.read_split(config.data_dir, "train").to_pylist()
    assert {r["key"].split(":")[0] for r in rows} == {"deb", "bible"}
    assert len(rows) == sum(b["out"]["train"] for b in by_source.values())
    tm_rows = [r for r in rows if r["key"].startswith("bible:")]
    assert all(r["fr_text"] and r["es_text"] and r["en_text"] for r in tm_rows)
    assert {p["path"] for p in m["inputs"]} >= {
        str(tmp_path / "bible.tmx"),
        "/usr/share/locale/fr/LC_MESSAGES/Linux-PAM.mo",
    }
