"""One optimization step and the learning-rate schedule, shared by the Ray Train loop and the benchmarks.

Plain PyTorch over plain arguments: `orchestration.train.loop` calls them with
values from the config, `benchmarks/train.py` with the same values outside Ray.
"""

from __future__ import annotations

import math

import torch

from model.nmt import Losses, Pair


def cpu_threads(threads: int) -> None:
    """This thread's torch for CPU work: `threads` intra-op threads, and denormal floats flushed to zero (FTZ and
    DAZ). Call it before the thread's first parallel op: the intra-op threads start then, and inherit the flag
    (it is per thread). A trained LSTM's activations and gradients reach the denormal range, where each operation
    costs many times the cycles: the multidomain recipe's steps took 1.9x as long on its trained weights as on
    fresh ones, 1.0x with the flag (benchmarks/RESULTS.md). Numbers under 1.2e-38 become 0."""
    torch.set_flush_denormal(True)
    torch.set_num_threads(threads)


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    sources: dict[str, Pair],
    targets: dict[str, Pair],
    *,
    ranking_weight: float,
    grad_clip: float | None,
    device: torch.device,
    teacher: dict[str, Pair] | None = None,
    distill_weight: float = 0.0,
    teacher_weight: torch.Tensor | None = None,
) -> Losses:
    """Forward one homogeneous batch, backward, clip, optimizer step; returns the model's outputs.

    `model` is a `MultilingualNMT`, possibly DDP-wrapped. Token ids go to `device`; lengths stay on
    the host. On a GPU the forward pass runs under bf16 autocast. `teacher`: the batch's teacher
    embeddings (`MultilingualNMT.forward`), with `distill_weight` and each row's `teacher_weight`.
    """
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
        out = model(
            to_device(sources, device),
            to_device(targets, device),
            ranking_weight=ranking_weight,
            teacher=to_device(teacher, device) if teacher else None,
            distill_weight=distill_weight,
            teacher_weight=teacher_weight.to(device, non_blocking=True) if teacher_weight is not None else None,
        )
    optimizer.zero_grad(set_to_none=True)
    out.loss.backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return out


def input_tokens(sources: dict[str, Pair], targets: dict[str, Pair], ranking_weight: float) -> int:
    """Tokens the encoders read in one batch: the sources, and the targets too when the ranking loss
    encodes them (host tensors: no device wait)."""
    encoded = {**sources, **targets} if ranking_weight > 0 else sources
    return int(sum(lens.sum() for _, lens in encoded.values()))


def to_device(pairs: dict[str, Pair], device: torch.device) -> dict[str, Pair]:
    """Token ids and lengths onto `device`, without waiting: nothing in a training step reads a value
    back to the host, so on a GPU the host queues step after step while the device works. (A host
    tensor used on the device is a blocking copy, which waits for every kernel queued before it.)"""
    return {
        lang: (ids.to(device, non_blocking=True), lens.to(device, non_blocking=True))
        for lang, (ids, lens) in pairs.items()
    }


def make_optimizer(
    model: torch.nn.Module, *, lr: float, weight_decay: float, device: torch.device
) -> torch.optim.Optimizer:
    """AdamW; on a GPU its fused kernel (a few launches per step instead of several per parameter)."""
    trained = [p for p in model.parameters() if p.requires_grad]  # a frozen encoder's are not
    return torch.optim.AdamW(trained, lr=lr, weight_decay=weight_decay, fused=device.type == "cuda" or None)


def scheduled_lr(
    step: int,
    elapsed_s: float,
    *,
    lr: float,
    warmup_steps: int,
    schedule: str,
    min_lr: float,
    max_steps: int,
    max_minutes: float | None,
) -> float | None:
    """The learning rate of the step after `step` steps and `elapsed_s` seconds of training; None where
    ReduceLROnPlateau owns it (the plateau schedule after warmup)."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if schedule == "plateau":
        return lr if step == warmup_steps and step > 0 else None
    if schedule == "constant":
        return lr
    if schedule == "inverse_sqrt":
        return lr * math.sqrt(max(warmup_steps, 1) / (step + 1))
    if schedule != "cosine":
        raise ValueError(f"unknown schedule {schedule!r}")
    done = step / max_steps  # cosine over the nearer of the two budgets
    if max_minutes is not None:
        done = max(done, elapsed_s / (60 * max_minutes))
    return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * min(done, 1.0)))
