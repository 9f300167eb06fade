"""Cross-version search: a retrained model's queries searched among an older model's vectors of the same split.

    .venv/bin/python benchmarks/compatible.py --old runs/bible6-cpu/train/model \
        --new runs/bible6-compatible/train/model runs/bible6-seed1/train/model runs/bible6-joint/train/model \
        [--config configs/bible6-cpu.yaml] [--map-tuples 200 1000 5000]

On the prepared test split's complete tuples (the Bible's: 1,000 in six languages), each model reading the text
through its own tokenizer (`SentenceEmbedder`), exact cosine search, top 1 (`evaluation.compatibility`, the error
`evaluate` counts):
- each model's own error: its queries in p among its own candidates in q, the average over every ordered pair
  p != q (what `evaluate` reports);
- the cross-version error: a new model's queries in p among the old model's candidates in q, every p != q, and
  p = q (the same sentence, embedded by each model);
- the cheap fallback: the least-squares map from the new space to the old (`evaluation.alignment.fit_map`),
  fitted on N training tuples' vectors of every language, and the cross-version error of the mapped queries.
A model trained with `train.compatible_with: <old>` should search the old vectors about as well as its own; an
independently trained one is at chance without a map. Prints a line per model, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.dataset import Dataset  # noqa: E402
from orchestration.config import load_config  # noqa: E402


def complete(table, languages: list[str]) -> dict[str, list[str]]:
    """{lang: texts} of the rows that hold every language."""
    valid = np.all([np.asarray(table[f"{lang}_text"].is_valid()) for lang in languages], axis=0)
    kept = table.filter(valid)
    return {lang: kept[f"{lang}_text"].to_pylist() for lang in languages}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/bible6-cpu.yaml", help="the dataset's config")
    parser.add_argument("--old", required=True, help="the model whose vectors are stored")
    parser.add_argument("--new", nargs="+", required=True, help="retrained models")
    parser.add_argument("--map-tuples", type=int, nargs="+", default=[200, 1000, 5000])
    args = parser.parse_args()

    from evaluation.alignment import fit_map
    from evaluation.compatibility import averages, cross_errors
    from orchestration.adapters import model_dir as model_files
    from orchestration.embedding.embedder import SentenceEmbedder

    config = load_config(args.config)
    data = Dataset.open(config.data_dir)
    languages = list(data.languages)
    columns = [f"{lang}_text" for lang in languages]
    test = complete(data.read("test", columns), languages)
    train = complete(data.read("train", columns), languages)
    order = np.random.default_rng(0).permutation(len(train[languages[0]]))[: max(args.map_tuples)]
    fit_texts = {lang: [train[lang][i] for i in order] for lang in languages}
    print(f"{len(test[languages[0]])} test tuples in {languages}; maps fitted on up to {len(order)} train tuples")

    def vectors(model: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], str]:
        local = model_files.fetch(model)
        embedder = SentenceEmbedder.load(local)
        lineage = model_files.lineage(Path(local))
        on_test = {lang: np.asarray(embedder.embed(test[lang], lang), np.float32) for lang in languages}
        on_train = {lang: np.asarray(embedder.embed(fit_texts[lang], lang), np.float32) for lang in languages}
        return on_test, on_train, lineage.get("compatible_with_sha256", "")

    started = time.monotonic()
    old_test, old_train, _ = vectors(args.old)
    old_sha = model_files.lineage(Path(model_files.fetch(args.old))).get("model_sha256", "")
    own_old = averages(cross_errors(old_test, old_test))["avg_error"]
    print(f"old {args.old}: own error {100 * own_old:.2f} %", flush=True)
    report: dict = {"old": {"model": args.old, "own_error": own_old}, "new": {}, "test": len(test[languages[0]])}
    for model in args.new:
        new_test, new_train, compatible_sha = vectors(model)
        own = averages(cross_errors(new_test, new_test))["avg_error"]
        cross = cross_errors(new_test, old_test)
        row: dict[str, Any] = {
            "compatible_with_old": bool(compatible_sha) and compatible_sha == old_sha,
            "own_error": own,
            "cross_error": averages(cross)["avg_error"],
            "cross_same_sentence_error": averages(cross)["same_sentence_error"],
            "cross_pairs": {k: round(v, 4) for k, v in cross.items()},
            "mapped": {},
        }
        for n in args.map_tuples:
            mapping = fit_map(
                np.concatenate([new_train[lang][:n] for lang in languages]),
                np.concatenate([old_train[lang][:n] for lang in languages]),
            )
            mapped = {lang: mapping.apply(v) for lang, v in new_test.items()}
            done = averages(cross_errors(mapped, old_test))
            row["mapped"][n] = {"cross_error": done["avg_error"], "same_sentence": done["same_sentence_error"]}
        report["new"][model] = row
        mapped_text = ", ".join(f"N={n}: {100 * m['cross_error']:.2f} %" for n, m in row["mapped"].items())
        print(
            f"new {model} (compatible_with the old: {row['compatible_with_old']}): own {100 * own:.2f} %, "
            f"cross-version {100 * row['cross_error']:.2f} % (same sentence "
            f"{100 * row['cross_same_sentence_error']:.2f} %); least-squares map {mapped_text}",
            flush=True,
        )
    report["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
