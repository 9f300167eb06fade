"""The model's arguments and the decoders a training teaches, from the config (orchestration/train/builders.py)."""

from __future__ import annotations

import pytest

from orchestration.config import ConfigError, load_config
from orchestration.train.builders import model_args, trained_decoders


def test_nmt_targets_narrow_the_decoders_taught_and_a_language_not_trained_is_refused():
    every = load_config(None, ["model.nmt_weight=1"])
    assert trained_decoders(every, ["en", "fr", "zh"]) == ["en", "fr", "zh"] and every.model.nmt_targets is None
    one = load_config(None, ["model.nmt_weight=1", "model.nmt_targets=[fr]"])
    assert trained_decoders(one, ["en", "fr", "zh"]) == ["fr"]
    assert model_args(one, ["en", "fr"], 100).nmt_targets == ["fr"]
    with pytest.raises(
        ConfigError, match=r"model.nmt_targets: \['fr'\] are not trained; the run trains \['en', 'zh'\]"
    ):
        model_args(one, ["en", "zh"], 100)
    assert trained_decoders(load_config(None, ["model.nmt_targets=[fr]"]), ["en", "fr"]) == []  # no NMT loss
    # with no ranking, a batch that decodes none of its targets would have no loss: refused (decoders_for included)
    with pytest.raises(ConfigError, match="a batch that decodes nothing would learn nothing"):
        load_config(None, ["model.nmt_weight=1", "model.ranking_weight=0", "model.nmt_targets=[fr]"])
