"""The fence of a run's commits. A command that holds the run dir's lease (`orchestration.adapters.lease`)
registers a check here for as long as it holds it; every commit (a published dataset, model, evaluation or
state file, a model registered, the champion alias moved) calls `check()` first, so that a holder whose lease
another host took over stops at its next commit, whatever its renewal thread has noticed yet, and writes
nothing more. With no lease held (a stage on its own, a local run dir) there is nothing to check."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

_CHECKS: list[Callable[[], None]] = []


@contextlib.contextmanager
def fenced(check: Callable[[], None]) -> Iterator[None]:
    """`check` runs before every commit in the block; it raises to stop the commit."""
    _CHECKS.append(check)
    try:
        yield
    finally:
        _CHECKS.remove(check)


def check() -> None:
    """Before a commit: raise (the holder's exception) when a lease this process holds is no longer its own."""
    for held in list(_CHECKS):
        held()
