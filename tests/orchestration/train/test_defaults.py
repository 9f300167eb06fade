"""The schema's defaults are the recipe that learns: the demo's configs repeat none of it (the 6-language demo adds
its teacher), the paper's recipe is a config of its own, and a config naming only its corpus learns on real
text."""

from __future__ import annotations

from pathlib import Path

import yaml

from orchestration.config import load_config
from orchestration.config.training import ModelConfig, TrainConfig
from orchestration.train.driver import train
from tests.support.corpus import SMALL_BOOKS
from tests.support.runs import store_uri

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
# what the demo configs set in `train`: the demo's 18-minute budget and its evaluation cadence
DEMO_BUDGET = {"max_minutes", "eval_every_steps"}
# what the 6-language demo sets in `model`: the teacher, distilled on every sentence of a tuple
DEMO_TEACHER = {"teacher": "use", "distill_weight": 1.0, "distill_loss": "contrastive", "distill_languages": "all"}


def test_the_demo_configs_learn_with_the_schemas_recipe():
    for name, teacher in (("bible6-cpu.yaml", DEMO_TEACHER), ("bible12-cpu.yaml", {})):
        raw = yaml.safe_load((CONFIGS / name).read_text())
        assert raw.get("model", {}) == teacher and set(raw["train"]) == DEMO_BUDGET, name
        config = load_config(CONFIGS / name)
        assert config.model == ModelConfig(**teacher)
        assert config.train.model_dump(exclude=DEMO_BUDGET) == TrainConfig().model_dump(exclude=DEMO_BUDGET)


def test_the_papers_recipe_is_a_config_of_its_own():
    config = load_config(CONFIGS / "paper.yaml")
    m, t = config.model, config.train
    assert (m.shared_encoder, m.shared_decoder, m.nmt_weight, m.ranking_weight, m.output) == (
        False,
        False,
        1.0,
        0.0,
        "softmax",
    )
    assert [p.kind for p in t.paths] == ["1:1"] and (t.lr, t.schedule, m.embed_init) == (1e-3, "plateau", "random")


def test_a_config_with_only_its_corpus_learns(small_dataset, tmp_path, local_ray):
    """Slow (200 steps of the default model, not the tests' tiny one): that the defaults learn is only seen
    by training them long enough to leave chance behind; the session's trained model is the tiny one."""
    # Only the corpus, plus the test's small split and vocabulary (the session's prepared dataset of
    # the same seven books), its own folders and a step budget: every model and train key is a default.
    path = tmp_path / "mine.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "mine",
                "run_dir": str(tmp_path / "run"),
                "dataset_dir": str(small_dataset.data_dir),
                "prepare": {
                    "sources": [{"kind": "bible", "books": SMALL_BOOKS}],
                    "split": {"dev_size": 40, "test_size": 40},
                    "spm": {"vocab_size": 2000},
                },
                "tracking": {"uri": store_uri(tmp_path)},
                "train": {"max_steps": 200},
            }
        )
    )
    config = load_config(path)
    result = train(config)
    # Chance is 39/40 = 97.5 % (each of 40 dev verses searched among the same 40 of every other language).
    # Here the defaults reach 41 % after these 200 steps (37 s of training on 2 shared cores); the paper's recipe
    # (configs/paper.yaml) stays at chance (97.7 %). 60 % leaves room for another machine's arithmetic
    # and still fails a recipe that does not learn.
    assert result.step == 200 and result.dev_error < 0.6, result.dev_error
