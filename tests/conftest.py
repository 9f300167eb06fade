"""The test suite's plugins: the shared fixtures (tests/support/fixtures.py), the tiers and their guard
(tests/support/tiers.py), and pytester for the guard's own test. docs/testing.md says how to run a tier."""

pytest_plugins = ["pytester", "tests.support.fixtures", "tests.support.tiers"]
