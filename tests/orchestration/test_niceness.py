"""The workers of a command's own Ray instance run at the command's niceness, or `runtime.worker_niceness`
above it: not at Ray's own default, 15, at which a training beside any other work got a few percent of a core."""

from __future__ import annotations

import os

import pytest

from orchestration.config import ConfigError, load_config


@pytest.mark.ray
def test_a_command_s_own_ray_runs_its_workers_at_the_configured_niceness(monkeypatch):
    import ray

    from orchestration.adapters.cluster import ensure_ray
    from tests.support.fixtures import reset_ray

    @ray.remote
    def niceness() -> int:
        return os.nice(0)

    @ray.remote
    class Worker:  # an actor, as Ray Train's workers and Ray Data's embedding actors are
        def niceness(self) -> int:
            return os.nice(0)

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    default = load_config().runtime.worker_niceness
    assert default == 0
    own = os.nice(0)  # the command's (this test process's): 0 unless the test run itself was niced
    for setting, expected in ((default, own), (7, own + 7)):
        reset_ray()  # the run's shared instance (started by plain `ray.init`, at Ray's 15), or the last one
        ensure_ray(None, worker_niceness=setting)  # stopped after the test (fixtures, _environment_restored)
        assert ray.get(niceness.remote()) == expected
        assert ray.get(Worker.remote().niceness.remote()) == expected
        assert "RAY_worker_niceness" not in os.environ  # set for the start alone: nothing else inherits it


def test_worker_niceness_outside_what_an_unprivileged_user_may_set_is_refused_naming_the_key():
    assert load_config(None, ["runtime.worker_niceness=19"]).runtime.worker_niceness == 19
    for value in (-1, 20):
        with pytest.raises(ConfigError, match=r"runtime\.worker_niceness"):
            load_config(None, [f"runtime.worker_niceness={value}"])
