"""The tiers' guard (tests/support/tiers.py): a test that starts Ray, a Beam pipeline, a server or a virtualenv
without its marker fails, naming the marker; with the marker it is let through. Each case is a small test file
run by pytester in a child pytest, the guard loaded as the suite loads it; the refused calls fail before they
start anything, so this file belongs to the fast tier."""

from __future__ import annotations

import pytest

GUARD = ("-p", "tests.support.tiers", "-p", "no:cacheprovider", "--strict-markers")
MARKERS = "\n".join(f"    {name}: x" for name in ("beam", "ray", "server", "venv", "cluster"))


@pytest.fixture
def run_file(pytester, monkeypatch):
    """Each case in a child pytest, the guard loaded there as the suite loads it: in this process the inner
    session would report through whatever a long-lived worker has accumulated (other tests' threads, lazily
    imported modules, hooks), and once failed with an INTERNALERROR while formatting a refused test's report."""
    from tests.support.procs import PACKAGE_ROOT

    monkeypatch.setenv("PYTHONPATH", str(PACKAGE_ROOT))
    pytester.makeini(f"[pytest]\nmarkers =\n{MARKERS}\n")

    def run(source: str):
        pytester.makepyfile(test_case=source)
        return pytester.runpytest_subprocess(*GUARD)

    return run


def test_an_unmarked_ray_init_fails_naming_the_marker(run_file):
    result = run_file("import ray\n\ndef test_unmarked():\n    ray.init(num_cpus=1)\n")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*UnmarkedResource: this test starts a Ray instance*not marked `ray`*"])


def test_an_unmarked_beam_pipeline_fails_before_it_runs(run_file):
    result = run_file(
        "import apache_beam as beam\n\n"
        "def test_unmarked():\n"
        "    with beam.Pipeline() as p:\n"
        "        p | beam.Create([1, 2])\n"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*not marked `beam`*"])


def test_an_unmarked_listening_socket_and_server_process_fail(run_file):
    result = run_file(
        "import socket, subprocess, sys\n\n"
        "def test_listen():\n"
        "    with socket.socket() as s:\n"
        "        s.bind(('127.0.0.1', 0))\n"
        "        s.listen()\n\n"
        "def test_moto_server():\n"
        "    subprocess.Popen(['moto_server', '-p', '0'])\n\n"
        "def test_venv():\n"
        "    subprocess.run([sys.executable, '-m', 'venv', 'x'])\n\n"
        "def test_a_training_command_in_a_child():\n"
        "    subprocess.run([sys.executable, '-m', 'orchestration.cli', 'train'])\n"
    )
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines(
        ["*not marked `server`*", "*not marked `server`*", "*not marked `venv`*", "*not marked `ray`*"],
        consecutive=False,
    )


def test_a_marked_test_is_let_through_and_help_needs_no_marker(pytester, monkeypatch):
    """In a child pytest: this test runs under the guard itself (it is unmarked), which would refuse the
    marked inner test's socket too."""
    from tests.support.procs import PACKAGE_ROOT

    monkeypatch.setenv("PYTHONPATH", str(PACKAGE_ROOT))
    pytester.makeini(f"[pytest]\nmarkers =\n{MARKERS}\n")
    pytester.makepyfile(
        test_case=(
            "import socket, subprocess, sys\nimport pytest\n\n"
            "@pytest.mark.server\n"
            "def test_marked_listen():\n"
            "    with socket.socket() as s:\n"
            "        s.bind(('127.0.0.1', 0))\n"
            "        s.listen()\n\n"
            "def test_help():\n"
            "    assert subprocess.run([sys.executable, '-m', 'orchestration.cli', 'train', '--help'],\n"
            "                          capture_output=True).returncode == 0\n"
        )
    )
    result = pytester.runpytest_subprocess(*GUARD)
    result.assert_outcomes(passed=2)


def test_the_users_of_a_shared_fixture_get_its_markers(pytester):
    pytester.makeconftest("import pytest\n\n@pytest.fixture\ndef local_ray():\n    return None\n")
    pytester.makeini(f"[pytest]\nmarkers =\n{MARKERS}\n")
    pytester.makepyfile(test_case="def test_uses(local_ray):\n    pass\n\ndef test_plain():\n    pass\n")
    result = pytester.runpytest(*GUARD, "-m", "not ray")
    result.assert_outcomes(passed=1, deselected=1)


def test_a_group_of_tests_stays_on_one_worker(pytester, monkeypatch, tmp_path):
    """`make test`'s `-n 2 --dist loadgroup`: the tests of a group (the cluster's, the fresh-venv ones, the users
    of the shared trained model) run on one worker, so what they share starts once. Each inner test records
    its worker; with pytest 9.2 and pytest-xdist 3.8 the groups were silently spread (setup.cfg)."""
    from tests.support.procs import PACKAGE_ROOT

    monkeypatch.setenv("PYTHONPATH", str(PACKAGE_ROOT))
    monkeypatch.setenv("WORKERS_LOG", str(tmp_path / "workers.log"))
    pytester.makeini(f"[pytest]\nmarkers =\n{MARKERS}\n")
    pytester.makeconftest("import pytest\n\n@pytest.fixture\ndef trained_run():\n    return None\n")
    record = (
        "import os, pytest\n\n"
        "def log(name):\n"
        "    with open(os.environ['WORKERS_LOG'], 'a') as f:\n"
        "        f.write(f\"{name} {os.environ['PYTEST_XDIST_WORKER']}\\n\")\n\n"
    )
    for module in ("a", "b"):
        tests = [
            f"@pytest.mark.venv\ndef test_venv_{i}():\n    log('venv')\n\n"
            f"def test_trained_{i}(trained_run):\n    log('trained')\n\n"
            f"def test_plain_{i}():\n    log('plain')\n\n"
            for i in range(4)
        ]
        pytester.makepyfile(**{f"test_{module}": record + "".join(tests)})
    result = pytester.runpytest_subprocess(*GUARD, "-n", "2", "--dist", "loadgroup")
    result.assert_outcomes(passed=24)
    ran: dict[str, set[str]] = {}
    for line in (tmp_path / "workers.log").read_text().splitlines():
        name, worker = line.split()
        ran.setdefault(name, set()).add(worker)
    assert len(ran["venv"]) == 1 and len(ran["trained"]) == 1, ran


def test_no_test_module_imports_another():
    """Shared test code lives in tests/support (and fixtures in tests/support/fixtures.py): a test module
    imported as a library drags its tests' module-level state and fixtures into another module."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent
    found = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            )
            found += [
                (path.relative_to(root), n)
                for n in names
                if n.startswith("tests.") and (n.rsplit(".", 1)[-1].startswith("test_") or n == "tests.conftest")
            ]
    assert found == []


def test_a_test_that_monkeypatches_an_entry_point_leaves_no_guard_behind(run_file):
    """A test that monkeypatches `ray.init` saves and puts back the process-wide wrapper, never another test's
    refusal: the next test, marked, finds `ray.init` as it was."""
    result = run_file(
        "import ray\nimport pytest\n\n"
        "def test_patches(monkeypatch):\n"
        "    monkeypatch.setattr(ray, 'init', lambda *a, **k: 'patched')\n\n"
        "@pytest.mark.ray\n"
        "def test_marked_after():\n"
        "    assert ray.init.__name__ == 'checked_ray_init'\n"
    )
    result.assert_outcomes(passed=2)
