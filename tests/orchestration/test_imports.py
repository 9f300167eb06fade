"""Only `prepare` (and `run`, which prepares) imports Apache Beam: its import is slow and warns about
GCS and BigQuery client libraries, which an `embed` or a `search` has no use for."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

# What train, evaluate, search, embed, mine, compare and tune import, at module level and in their functions.
BEAM_FREE = [
    "orchestration.cli",
    "orchestration.train.driver",
    "orchestration.train.loop",
    "orchestration.train.checkpoint",
    "orchestration.train.tune",
    "orchestration.evaluate.job",
    "orchestration.evaluate.embedding",
    "orchestration.embedding.embedder",
    "orchestration.embed.corpus",
    "orchestration.batch.pool",
    "orchestration.embedding.inputs",
    "orchestration.embed.search",
    "orchestration.embedding.pyfunc",
    "orchestration.serve.app",
    "orchestration.mine.job",
    "orchestration.mine.inputs",
    "orchestration.lifecycle.compare",
    "orchestration.adapters.tracking",
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
SERVING = [
    "core.dataset",
    "core.storage",
    "core.normalize",
    "core.schema",
    "core.errors",
    "model.nmt",
    "model.inference",
    "orchestration.embedding.embedder",
    "orchestration.embedding.pyfunc",
]


def test_the_model_the_embedder_and_the_pyfunc_need_neither_beam_nor_ray_train():
    # nor the pipeline, nor the run config's schema: a model directory is loaded by its own record
    assert loaded(SERVING, ("apache_beam", "ray.train", "pipelines", "orchestration.config")) == set()
    assert loaded(["ray.train.torch"], ("apache_beam", "ray.train")) == {"ray.train"}  # the check can fail
    from orchestration.embedding.pyfunc import REQUIREMENTS

    assert not {"apache-beam", "ray", "faiss-cpu"} & set(REQUIREMENTS)


def test_the_http_server_needs_neither_beam_nor_ray_train_nor_faiss():
    """faiss only for the nearest sentences, imported when a stored set is there to search."""
    server = ["orchestration.serve.app", "orchestration.cli.serve"]
    assert loaded(server, ("apache_beam", "ray.train", "faiss")) == set()


def test_model_and_evaluation_import_nothing_of_the_beam_job():
    root = Path(__file__).resolve().parents[2]
    for package in ("core", "model", "evaluation"):
        for path in (root / package).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                )
                assert not [n for n in names if n.split(".")[0] in ("pipelines", "orchestration")], (path, names)


PRODUCT = ("core", "model", "pipelines", "orchestration", "evaluation")


def import_graph() -> tuple[dict[str, Path], dict[str, set[str]]]:
    """The product's modules (name -> file) and which of them each imports, read from the sources (imports in
    functions too; `from a import b` counts as an import of `a.b` when that is a module)."""
    from tests.support.procs import PACKAGE_ROOT

    modules = {}
    for package in PRODUCT:
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
    return modules, graph


def test_no_module_of_the_product_imports_itself_back():
    """No circle in the product's import graph: a module that two others need in turn belongs in a room of
    its own (the embedding job once imported the corpus module, which imported it)."""
    modules, graph = import_graph()

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
    assert "orchestration.batch.pool" in graph and len(graph) > 50  # the graph was read


# The rooms of the product, lowest first: a room imports only from rooms of a lower rank, never from one of
# its own rank or above (docs/layout.md). The stages (train, evaluate, mine, serve) share a rank: none
# imports another; what two of them need lives below them.
RANKS = {
    "core": 0,
    "model": 1,
    "evaluation": 1,
    "pipelines": 1,
    "orchestration.config": 2,
    "orchestration.adapters": 3,
    "orchestration.embedding": 4,
    "orchestration.batch": 5,
    "orchestration.embed": 6,
    "orchestration.train": 7,
    "orchestration.evaluate": 7,
    "orchestration.mine": 7,
    "orchestration.serve": 7,
    "orchestration.lifecycle": 8,
    "orchestration.cli": 9,
}


def room(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "orchestration" and len(parts) > 1 else parts[0]


def running_up(graph: dict[str, set[str]]) -> list[str]:
    """The imports of `graph` into a room of the importer's rank or above."""
    return sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        for target in targets
        if room(target) not in (room(name), "orchestration") and RANKS[room(target)] >= RANKS[room(name)]
    )


def test_every_import_runs_down_the_rooms_and_the_root_of_orchestration_holds_only_rooms():
    from tests.support.procs import PACKAGE_ROOT

    modules, graph = import_graph()
    assert {room(m) for m in modules} - {"orchestration"} == set(RANKS), "a room without a rank, or a rank left over"
    assert running_up(graph) == []
    root = PACKAGE_ROOT / "orchestration"
    assert sorted(p.name for p in root.glob("*.py")) == ["__init__.py"], "a module at the root of orchestration/"
    # the check can fail: tracking once imported the registry's packaging from the serving package, and
    # training the run lock from lifecycle (which imports training)
    assert running_up(
        {
            "orchestration.adapters.tracking": {"orchestration.lifecycle.packaging"},
            "orchestration.train.loop": {"orchestration.lifecycle.run", "orchestration.adapters.lock"},
            "orchestration.serve.app": {"orchestration.mine.job"},
        }
    ) == [
        "orchestration.adapters.tracking -> orchestration.lifecycle.packaging",
        "orchestration.serve.app -> orchestration.mine.job",
        "orchestration.train.loop -> orchestration.lifecycle.run",
    ]
