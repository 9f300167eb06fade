"""Translation quality in `evaluate` (`evaluate.translation_rows` > 0): the split's first N complete tuples, each
language's sentences embedded and decoded into every language whose decoder the model's training taught, scored
against the split's own sentences by sacrebleu (BLEU and chrF, offline: nothing is downloaded).

    scores = translation_scores(config, model_dir, languages)   # {"en-fr": {"bleu": 12.3, "chrf": 40.1}, ...}

A pair p-q is p's vectors decoded into q; p-p is the round trip (auto-encoding) through the vector. Decoding is
greedy (`evaluate.translation_beam`: beam search), each sentence stopping at twice its source's tokens and 10.
BLEU tokenizes Chinese with sacrebleu's "zh", Japanese with "ja-mecab" where installed, every other language
with "13a"; chrF needs no tokenizer.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from core.dataset import Dataset
from orchestration.config import Config

log = logging.getLogger(__name__)
Scores = dict[str, dict[str, float]]
_BLEU_TOKENIZER = {"zh": "zh"}


def translation_scores(config: Config, model_dir: Path, languages: list[str]) -> Scores:
    """BLEU and chrF of every ordered pair (p, q) of `languages` (p == q included) whose q has a trained decoder;
    {} when the model has none (a line says so)."""
    import sacrebleu

    from model.inference import embed
    from orchestration.embedding.translator import SentenceTranslator, max_tokens_out

    translator = SentenceTranslator.load(model_dir)
    targets = [q for q in languages if q in translator.decoders]
    if not targets:
        log.info(
            "evaluate.translation_rows: the model's training taught no decoder of %s; no translation scored", languages
        )
        return {}
    rows = config.evaluate.translation_rows
    table = Dataset.open(config.data_dir).read(
        config.evaluate.split, [f"{lang}_{column}" for lang in languages for column in ("ids", "text")]
    )
    complete = np.flatnonzero(np.all([np.asarray(table[f"{lang}_text"].is_valid()) for lang in languages], axis=0))[
        :rows
    ]
    chosen = table.take(complete)
    texts = {lang: chosen[f"{lang}_text"].to_pylist() for lang in languages}
    ids = {lang: [np.asarray(row, np.int64) for row in chosen[f"{lang}_ids"].to_pylist()] for lang in languages}
    model = translator.model
    vectors = {lang: embed(model, ids[lang], lang, max_tokens=config.evaluate.max_tokens) for lang in languages}
    scores: Scores = {}
    for p in languages:
        limits = max_tokens_out([len(s) for s in ids[p]])
        for q in targets:
            hypotheses = translator.decode(vectors[p], q, beam=config.evaluate.translation_beam, max_len=limits)
            bleu = sacrebleu.corpus_bleu(hypotheses, [texts[q]], tokenize=_BLEU_TOKENIZER.get(q, "13a"))
            chrf = sacrebleu.corpus_chrf(hypotheses, [texts[q]])
            scores[f"{p}-{q}"] = {"bleu": round(float(bleu.score), 2), "chrf": round(float(chrf.score), 2)}
    log.info("translation: %d pairs of %d sentences scored (BLEU, chrF)", len(scores), len(complete))
    return scores


def averages(scores: Scores) -> dict[str, float]:
    """Mean BLEU and chrF over the pairs of two languages, and over the round trips (p-p)."""
    out: dict[str, float] = {}
    for kind, keep in (("", lambda p, q: p != q), ("roundtrip_", lambda p, q: p == q)):
        chosen = [m for pair, m in scores.items() if keep(*pair.split("-", 1))]
        for metric in ("bleu", "chrf"):
            if chosen:
                out[f"{kind}{metric}"] = round(float(np.mean([m[metric] for m in chosen])), 2)
    return out


def table(scores: Scores, languages: list[str], metric: str) -> dict[str, list]:
    """One metric as a table for MLflow's UI: a column `source`, then one per target language."""
    targets = [q for q in languages if any(pair.endswith(f"-{q}") for pair in scores)]
    out: dict[str, list] = {"source": list(languages), **{q: [] for q in targets}}
    for q in targets:
        out[q] = [scores.get(f"{p}-{q}", {}).get(metric) for p in languages]
    return out
