"""`train.decoders_for`: the decoders of a trained model learn on its frozen encoders. The shared trained run's
model (tests/support/fixtures.py) is the frozen one: after 20 more steps its encoders are the same bit for bit
(every vector it made stays valid), its decoders changed, the best checkpoint is chosen by the dev NLL, the model
file names the decoders taught, and the run is another fingerprint; what would train anything but decoders, or
the wrong tokenizer or languages, is refused before any work."""

from __future__ import annotations

import pytest
import torch

from core.errors import UserError
from model.model_file import load_meta, load_model
from orchestration.adapters import tracking
from orchestration.train.driver import train
from tests.support.runs import config_for

DECODERS = ["model.ranking_weight=0", "model.nmt_weight=1.0", "train.max_steps=20"]


def test_decoders_learn_on_frozen_encoders_that_stay_bit_for_bit_the_same(trained_run, tmp_path):
    frozen = trained_run.result.model_dir
    config = config_for(trained_run.small_dataset, tmp_path / "decoders", *DECODERS, f"train.decoders_for={frozen}")
    result = train(config)
    before, _ = load_model(str(frozen / "model.safetensors"))
    after, meta = load_model(str(result.model_dir / "model.safetensors"))
    assert after.args == before.args  # the model's own architecture, not the config's
    old, new = before.state_dict(), after.state_dict()
    encoders = [name for name in old if name.startswith("encoders.")]
    decoders = [name for name in old if name.startswith("decoders.")]
    assert encoders and decoders
    assert all(torch.equal(old[name], new[name]) for name in encoders)
    assert any(not torch.equal(old[name], new[name]) for name in decoders)
    assert meta.decoders == sorted(after.languages) and load_meta(str(frozen / "model.safetensors")).decoders

    run = tracking.get_run(config.tracking.uri, result.run_id)
    nll = [v for _, v in tracking.metric_history(config.tracking.uri, result.run_id, "dev/nll")]
    assert len(nll) == 2 and all(v > 0 for v in nll)
    assert result.step == 20 and run.data.params["train.decoders_for"] == str(frozen)
    xsim = [v for _, v in tracking.metric_history(config.tracking.uri, result.run_id, "dev/xsim_error")]
    assert len(set(xsim)) == 1  # the encoders did not move: nor did the similarity error


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.ranking_weight=1.0"], "model.ranking_weight and model.distill_weight to 0"),
        (["model.nmt_weight=0", "model.ranking_weight=0"], "nmt_weight and ranking_weight are both 0"),
        (["train.languages=[en, fr]"], "set train.languages to"),
    ],
)
def test_a_run_that_would_train_more_than_decoders_is_refused_before_any_work(
    trained_run, tmp_path, overrides, message
):
    frozen = trained_run.result.model_dir
    with pytest.raises(UserError, match=message):
        config = config_for(
            trained_run.small_dataset, tmp_path / "refused", *DECODERS, f"train.decoders_for={frozen}", *overrides
        )
        train(config)
    assert not (tmp_path / "refused" / "run").exists()
