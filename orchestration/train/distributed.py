"""The two collectives of the loop: rank 0's decisions on every rank, and sums over the workers."""

from __future__ import annotations

from typing import Any

import torch


def broadcast(values: list[float], device: torch.device) -> list[float]:
    """Rank 0's values on every rank (identical LR, early-stop and time-limit decisions)."""
    if not torch.distributed.is_initialized():
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    torch.distributed.broadcast(tensor, src=0)
    return tensor.tolist()


def all_sum(values: list[float], device: torch.device) -> list[float]:
    """Each value summed over the workers."""
    if not torch.distributed.is_initialized():
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    torch.distributed.all_reduce(tensor)
    return tensor.tolist()


def gather(value: Any) -> list[Any]:
    """Every rank's `value` (picklable), in rank order, on every rank."""
    if not torch.distributed.is_initialized():
        return [value]
    out: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(out, value)
    return out
