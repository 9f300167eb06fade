"""The model card (orchestration/lifecycle/card.py) from a model directory's files: what it says with and without
an evaluation, a manifest and decoders. Registration and `interlingua card`: lifecycle/test_run.py."""

from __future__ import annotations

import json

import yaml

from model.model_file import save_model
from orchestration.lifecycle.card import model_card
from tests.support.models import LANGS, small_model


def model_dir(tmp_path, **meta):
    folder = tmp_path / "model"
    folder.mkdir()
    save_model(small_model(shared_encoder=True), str(folder / "model.safetensors"), **meta)
    config = {
        "name": "bible6-cpu",
        "prepare": {"sources": [{"kind": "bible", "name": "bible"}]},
        "model": {"ranking_weight": 1.0, "nmt_weight": 0.0, "distill_weight": 1.0, "teacher": "use"},
        "train": {"max_minutes": 16},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "lineage.json").write_text(
        json.dumps({"dataset_fingerprint": "fe1a", "spm_sha256": "ed8d", "model_sha256": "9c1a"})
    )
    (folder / "progress.json").write_text(json.dumps({"step": 5380, "elapsed_s": 960.6}))
    return folder


def evaluation():
    pairs = {
        f"{p}-{q}": {"error": 0.01 * (i + 1)} for i, (p, q) in enumerate((p, q) for p in LANGS for q in LANGS if p != q)
    }
    transfer = {
        "bible_books": {"classes": dict.fromkeys("abcdefg", 10), "averages": {"own": 0.8, "cross": 0.75, "gap": 0.1}}
    }
    return {"sentences": 1000, "averages": {"all": 0.155}, "pairs": pairs, "transfer": transfer}


def test_a_card_says_what_the_model_is_for_what_it_saw_how_it_learned_and_where_it_fails(tmp_path):
    manifest = {
        "counts": {
            "sources": {"bible": {"in": 31102, "out": {"train": 28851, "dev": 1000, "test": 1000}}},
            "tuples": {"dropped": {"duplicate": 98, "contaminated": 125}},
        }
    }
    card = model_card(
        model_dir(tmp_path, decoders=[]), evaluation=evaluation(), manifest=manifest, name="demo", version="3"
    )
    assert card.startswith("# Model card: demo v3\n")
    assert "Sentence embeddings of 6 languages (en, fr, es, ru, ar, zh)" in card
    assert "bible: 31,102 tuples read; 28,851 train, 1,000 dev, 1,000 test" in card
    assert "Tuples dropped: contaminated 125, duplicate 98" in card
    assert "Losses: ranking 1.0, distillation 1.0; teacher use." in card and "16 minutes; trained 5,380 steps" in card
    assert "| en |  | 1.0 | 2.0 | 3.0 | 4.0 | 5.0 |" in card and "average 15.50 %" in card
    assert "balanced accuracy 80.0 % in the training language, 75.0 % in the others" in card
    assert "Its worst pairs: zh-ar 30.0 %, zh-ru 29.0 %, zh-es 28.0 % error." in card  # the three highest
    assert "its shared encoder embeds them in a test set" in card and "cannot turn a vector back" in card
    assert "Model file sha256 `9c1a`" in card and "interlingua run -c config.yaml" in card


def test_a_card_without_evaluation_or_manifest_says_so_and_one_with_decoders_offers_translation(tmp_path):
    card = model_card(model_dir(tmp_path, decoders=["en", "fr"]))
    assert card.startswith("# Model card: bible6-cpu\n") and "Not evaluated: `interlingua evaluate`" in card
    assert "the dataset's manifest was not reachable" in card and "Sources: bible" in card
    assert "Translation through the vector into en, fr (`interlingua translate`)." in card
    assert "cannot turn a vector back" not in card and "worst pairs" not in card


def test_a_model_exported_before_its_records_existed_gets_a_card_naming_its_file(tmp_path):
    from core.dataset import file_sha256

    folder = model_dir(tmp_path, decoders=[])
    for name in ("config.yaml", "lineage.json", "progress.json"):
        (folder / name).unlink()
    card = model_card(folder, evaluation={"pairs": {"en-fr": {}}, "translation": {"en-fr": {"bleu": 1.0}}})
    assert f"Model file sha256 `{file_sha256(folder / 'model.safetensors')}`" in card
    assert (
        "trained unknown" in card and "Sources: (the dataset's" not in card and "Dataset fingerprint `unknown`" in card
    )
