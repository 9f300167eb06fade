"""Only `prepare` (and `run`, which prepares) imports Apache Beam: its import is slow and warns about
GCS and BigQuery client libraries, which an `embed` or a `search` has no use for."""
from __future__ import annotations

import subprocess
import sys


# What train, evaluate, search, embed, mine, compare and tune import, at module level and in their functions.
BEAM_FREE = [
    "orchestration.cli",
    "orchestration.train.driver",
    "orchestration.train.loop",
    "orchestration.train.checkpoint",
    "orchestration.train.tune",
    "orchestration.evaluate.job",
    "orchestration.evaluate.embedding",
    "orchestration.serve.embedder",
    "orchestration.serve.corpus",
    "orchestration.serve.job",
    "orchestration.serve.inputs",
    "orchestration.serve.nearest",
    "orchestration.serve.pyfunc",
    "orchestration.serve.app",
    "orchestration.mine.job",
    "orchestration.mine.inputs",
    "orchestration.lifecycle.compare",
    "orchestration.tracking",
    "pipelines.clean",
    "pipelines.sources",
    "core.dataset",
    "pipelines.tokenizer",
]


def loaded(modules: list[str], packages: tuple[str, ...]) -> set[str]:
    """Which of `packages` importing `modules` in a fresh interpreter loads (one interpreter for them all)."""
    code = f"import sys\nfor m in {modules!r}: __import__(m)\nprint(*[p for p in {packages!r} if p in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def test_the_commands_that_run_no_beam_job_do_not_import_beam():
    assert loaded(BEAM_FREE, ("apache_beam",)) == set()
    assert loaded(["pipelines.prepare"], ("apache_beam",)) == {"apache_beam"}  # the check can fail: prepare does


# What the served model imports: the Beam-free core, the model and the embedder.
SERVING = ["core.dataset", "core.storage", "core.normalize", "core.schema", "core.errors", "model.nmt",
           "model.inference", "orchestration.serve.embedder", "orchestration.serve.pyfunc"]


def test_the_model_the_embedder_and_the_pyfunc_need_neither_beam_nor_ray_train():
    assert loaded(SERVING, ("apache_beam", "ray.train")) == set()
    assert loaded(["ray.train.torch"], ("apache_beam", "ray.train")) == {"ray.train"}  # the check can fail
    from orchestration.serve.pyfunc import REQUIREMENTS

    assert not {"apache-beam", "ray", "faiss-cpu"} & set(REQUIREMENTS)


def test_the_http_server_needs_neither_beam_nor_ray_train_nor_faiss():
    """faiss only for the nearest sentences, imported when a stored set is there to search."""
    server = ["orchestration.serve.app", "orchestration.cli.serve"]
    assert loaded(server, ("apache_beam", "ray.train", "faiss")) == set()


def test_model_and_evaluation_import_nothing_of_the_beam_job():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for package in ("core", "model", "evaluation"):
        for path in (root / package).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                assert not [n for n in names if n.split(".")[0] in ("pipelines", "orchestration")], (path, names)


def test_no_module_of_the_product_imports_itself_back():
    """No circle in the product's import graph, read from the sources (imports in functions too): a module
    that two others need in turn belongs in a room of its own (serve/job.py once imported serve/corpus.py,
    which imported it)."""
    import ast
    from pathlib import Path

    from tests.support.procs import PACKAGE_ROOT

    modules = {}
    for package in ("core", "model", "pipelines", "orchestration", "evaluation"):
        for path in (PACKAGE_ROOT / package).rglob("*.py"):
            parts = path.relative_to(PACKAGE_ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                found.update([base, *(f"{base}.{alias.name}" for alias in node.names)])
        for target in found:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph.setdefault(name, set()).add(target)

    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    circles = sorted(name for name in modules if name in reaches(name))
    assert circles == [], f"modules that import themselves back: {circles}"
    assert "orchestration.serve.job" in graph and len(graph) > 50  # the graph was read
