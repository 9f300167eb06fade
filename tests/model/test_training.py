"""The shared training step and the learning-rate schedule."""

from __future__ import annotations

import pytest
import torch

from model.batching import pad
from model.nmt import MultilingualNMT
from model.training import input_tokens, scheduled_lr, train_step


def lr(step: int, elapsed: float = 0.0, **kwargs) -> float | None:
    args = dict(lr=1.0, min_lr=0.1, warmup_steps=4, max_steps=100, max_minutes=None, schedule="cosine")
    return scheduled_lr(step, elapsed, **{**args, **kwargs})


def test_scheduled_lr_warms_up_then_follows_the_schedule():
    assert [lr(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert 0.99 < lr(4) < 1.0  # the cosine spans the whole budget, warmup included
    assert lr(50) == pytest.approx(0.55)  # half way: (1 + 0.1) / 2
    assert lr(100) == pytest.approx(0.1)
    # with a time budget the nearer of the two ends the schedule: 30 of 60 s is half way
    assert lr(5, 30.0, max_minutes=1.0) == pytest.approx(0.55)
    assert lr(15, schedule="inverse_sqrt") == pytest.approx(0.5)  # sqrt(4 / 16)
    assert lr(99, schedule="constant") == 1.0
    assert lr(4, schedule="plateau") == 1.0 and lr(5, schedule="plateau") is None  # then ReduceLROnPlateau
    assert lr(0, schedule="plateau", warmup_steps=0) is None
    with pytest.raises(ValueError, match="unknown schedule"):
        lr(10, schedule="linear")


def test_train_step_updates_the_weights_and_counts_the_encoded_tokens():
    torch.manual_seed(0)
    model = MultilingualNMT(
        languages=["en", "fr"],
        vocab_size=30,
        embed_dim=8,
        encoder_hidden=8,
        decoder_hidden=8,
        dropout=0.0,
        shared_encoder=True,
        nmt_weight=0.0,
    )
    sources = {"fr": pad([torch.tensor([5, 6, 7]).numpy(), torch.tensor([8, 9]).numpy()], eos=True)}
    targets = {"en": pad([torch.tensor([10, 11]).numpy(), torch.tensor([12]).numpy()], eos=False)}
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    out = train_step(model, optimizer, sources, targets, ranking_weight=1.0, grad_clip=1.0, device=torch.device("cpu"))
    assert out.ranking is not None and out.nll == {}
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert input_tokens(sources, targets, ranking_weight=1.0) == (4 + 3) + (2 + 1)  # sources with EOS, targets
    assert input_tokens(sources, targets, ranking_weight=0.0) == 4 + 3  # no ranking: the targets are not encoded


def test_cpu_threads_flushes_denormals_in_the_calling_thread_and_the_intra_op_threads_it_starts():
    """A thread set up by `cpu_threads` computes denormal floats as zero, in its own ops and in a parallel op
    (its intra-op threads start after the flag and inherit it); a thread without the flag keeps them."""
    import threading

    from model.training import cpu_threads

    tiny = torch.full((1 << 16,), 1e-39)  # denormal in float32 (under 1.2e-38)
    results = {}

    def run(name: str, set_up: bool) -> None:
        if set_up:
            cpu_threads(2)
        else:  # as a thread starts where nothing set the flag (threads inherit it from the one starting them)
            torch.set_flush_denormal(False)
        results[name] = ((tiny * 1.0).count_nonzero().item(), (tiny + 0.0).sum().item())

    for name, set_up in (("plain", False), ("set up", True)):
        thread = threading.Thread(target=run, args=(name, set_up))
        thread.start()
        thread.join()
    assert results["plain"][0] == len(tiny) and results["plain"][1] > 0
    assert results["set up"] == (0, 0.0)
