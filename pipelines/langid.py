"""Language identification for the `wrong_language` filter: py3langid, whose model ships in the package.

The naive Bayes model of langid.py (142 labels: languages and some varieties; about 0.2 ms of CPU a
sentence) gives every sentence a probability per language. A sentence is in the wrong language
when its column's language gets less than the configured threshold: French text in the
Spanish column gets ~0 for Spanish, a real Spanish verse mostly ~1 (measured on the Bible in
benchmarks/RESULTS.md). Probabilities are over all the model's languages, so close varieties
share the mass (Spanish and Extremaduran, Arabic and Egyptian Arabic): keep thresholds low.
"""

from __future__ import annotations

import functools
import logging

from pipelines.config import LanguageIdConfig

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _identifier():
    """The model, loaded once per process (about 2 s)."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def known_languages() -> frozenset[str]:
    """The language codes the model knows (ISO 639-1 where there is one: en, fr, zh...)."""
    return frozenset(_identifier().labels)


def unchecked_languages(languages: list[str]) -> list[str]:
    """Those of `languages` the model does not know: the filter keeps all their sentences."""
    known = known_languages()
    return [lang for lang in languages if lang.split("_", 1)[0] not in known]


class LanguageCheck:
    """`probability(text, lang)` and `is_wrong(text, lang)` for the languages the model knows."""

    def __init__(self, config: LanguageIdConfig) -> None:
        self.config = config
        self._known = known_languages()

    def probability(self, text: str, lang: str) -> float | None:
        """P(lang | text) under the model; None for a language it does not know."""
        lang = lang.split("_", 1)[0]
        if lang not in self._known:
            return None
        return dict(_identifier().rank(text))[lang]  # every language's probability; they sum to 1

    def is_wrong(self, text: str, lang: str) -> bool:
        """True when `text` is unlikely to be in `lang` (below its threshold); False for unknown languages."""
        threshold = self.config.threshold(lang)
        if threshold <= 0.0:
            return False
        p = self.probability(text, lang)
        return p is not None and p < threshold
