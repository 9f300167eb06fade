"""The test suite's plugins: the shared fixtures (tests/support/fixtures.py), the tiers and their guard
(tests/support/tiers.py), and pytester for the guard's own test. docs/testing.md says how to run a tier."""

import os

pytest_plugins = ["pytester", "tests.support.fixtures", "tests.support.tiers", "tests.support.cpu"]

# Ray Train's controller polls its workers every 2 s by default, so each training waits up to a poll to start
# and to end; the suite runs about sixty. Its preemption watcher (an extra actor, hence a process, per
# training) watches for nodes being drained, which no test does. Set for the whole run, so that the commands
# the tests start in child processes and the test cluster's drivers inherit them.
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
# Ray stops an idle worker process after 1 s and starts a new one for the next task (1.5-2 CPU-seconds each:
# Python, Ray, then torch): between the steps of one command and from one test to the next on the shared local
# instance, most task workers were new processes. Idle workers are kept 5 minutes instead. Two tests, run
# alone and alternating with and without it, twice (2026-11-27): 287 and 305 CPU-seconds against 317 and 317.
os.environ.setdefault("RAY_idle_worker_killing_time_threshold_ms", "300000")
# Ray starts its worker processes at niceness 15 (its drivers and its own servers keep 0). Beside the other
# test process's work (a Beam job, a server, a command's driver: all at 0) they got a few percent of a core:
# with two busy loops beside it, the tune test's first trial was still importing after 150 s and never reached
# its first checkpoint in 300 s, a step that takes about 30 s at the same niceness (2026-11-28). Two tests
# sharing two cores share them evenly when every process has the same niceness.
os.environ.setdefault("RAY_worker_niceness", "0")
