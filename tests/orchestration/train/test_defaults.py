"""The schema's defaults are the recipe that learns: the demo's configs repeat none of it (the 6-language demo adds
its teacher), the paper's recipe is a config of its own, and a config naming only its corpus learns on real
text."""

from __future__ import annotations

from pathlib import Path

import yaml

from orchestration.config import load_config
from orchestration.config.training import ModelConfig, TrainConfig

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
