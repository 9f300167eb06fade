"""The search of `interlingua evaluate`: every ordered pair of the stored embeddings searched on Ray tasks
(`evaluation.xsim.search_pairs`), each reading one block of queries and `evaluate.shards` candidate shards;
the merged top-k written to disk as they come, then every pair's metrics."""

from __future__ import annotations

from pathlib import Path

from evaluation.store import StoredEmbeddings
from evaluation.xsim import approximate_recall, pair_metrics, search_pairs
from orchestration.adapters.cluster import RayExecutor, shipped
from orchestration.adapters.progress import Progress
from orchestration.config import Config


def measure(config: Config, store: StoredEmbeddings, results_dir: Path) -> dict[tuple[str, str], dict[str, float]]:
    """Every ordered pair's metrics, searched on Ray tasks that read the stored embeddings (`cluster.shipped`; results
    written to `results_dir`); with an approximate index also its recall against an exact search of
    the first `evaluate.recall_queries` queries."""
    e = config.evaluate
    # the tasks run on any node: the embeddings of this host's disk (the run dir, or the working copy of a
    # bucket's) go to them through Ray's object store
    executor = RayExecutor(config.runtime.cpus_per_task)
    store = shipped(store)
    k = max(5, e.margin_k)
    languages = len(store.languages)
    progress = Progress(len(store) * languages * (languages - 1), verb="searched", unit="queries")
    results = search_pairs(
        store,
        metric=e.metric,
        shards=e.shards,
        k=k,
        index=e.index,
        executor=executor,
        results_dir=results_dir,
        progress=progress.update,
    )
    progress.close()
    pairs = pair_metrics(results, store.hashes(), metric=e.metric, margin_k=e.margin_k)
    if e.index != "flat":
        queries = min(e.recall_queries, len(store))
        exact = search_pairs(store, metric=e.metric, shards=e.shards, k=k, queries=queries, executor=executor)
        for pair, recall in approximate_recall(results, exact).items():
            pairs[pair].update(recall)
    return pairs
