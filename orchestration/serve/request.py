"""What `interlingua serve` accepts: a JSON body checked against the `serve` limits before any work.

    POST /embed {"sentences": ["Dieu est amour."], "lang": "fr"}
    POST /embed {"sentences": ["Dieu est amour."], "lang": "fr", "nearest": {"k": 3, "in": ["en"]}}

Plain functions, testable without Ray or HTTP: `parse_embed` turns the raw body into an `EmbedRequest` or
raises `RequestRejected` with the HTTP status and a message that says what to change: 413 for a body or a
batch above its limit (send less per request), 422 for what no resend fixes as is (not JSON, a missing or
mistyped field, a language the model does not know, a sentence too long).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from orchestration.config.stages import ServeConfig


class RequestRejected(Exception):
    """A request refused before any work; `status` is its HTTP status, the message says what to change."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class EmbedRequest:
    sentences: tuple[str, ...]
    lang: str
    nearest_k: int = 0  # 0: no neighbours asked for
    nearest_in: tuple[str, ...] = ()  # the languages of the stored set to search


def check_length(declared: str | None, limits: ServeConfig) -> None:
    """413 when the Content-Length header already says the body is above `max_body_bytes`."""
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise RequestRejected(413, f"the body is {int(declared)} bytes, above serve.max_body_bytes "
                                   f"({limits.max_body_bytes}); send fewer sentences per request")


def parse_embed(body: bytes, limits: ServeConfig, languages: list[str]) -> EmbedRequest:
    """The checked request of a raw /embed body (see the module docstring); RequestRejected otherwise."""
    if len(body) > limits.max_body_bytes:
        raise RequestRejected(413, f"the body is above serve.max_body_bytes ({limits.max_body_bytes} bytes); "
                                   "send fewer sentences per request")
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, a huge number
        raise RequestRejected(422, f"the body is not JSON we accept ({str(exc)[:200]}); send "
                                   '{"sentences": ["..."], "lang": "fr"}') from None
    if not isinstance(data, dict):
        raise RequestRejected(422, 'the body must be a JSON object: {"sentences": ["..."], "lang": "fr"}')
    unknown = sorted(set(data) - {"sentences", "lang", "nearest"})
    if unknown:
        raise RequestRejected(422, f"unknown field(s) {unknown}; the fields are sentences, lang and nearest")
    sentences, lang = data.get("sentences"), data.get("lang")
    if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
        raise RequestRejected(422, '"sentences" must be a list of strings')
    if len(sentences) > limits.max_sentences:
        raise RequestRejected(413, f"{len(sentences)} sentences, above serve.max_sentences "
                                   f"({limits.max_sentences}); split the batch")
    if not isinstance(lang, str) or lang not in languages:
        raise RequestRejected(422, f'"lang": the model knows {languages}, not {lang!r}')
    for i, sentence in enumerate(sentences):
        if len(sentence) > limits.max_sentence_chars:
            raise RequestRejected(422, f"sentence {i} has {len(sentence)} characters, above "
                                       f"serve.max_sentence_chars ({limits.max_sentence_chars}); cut it")
        try:  # a lone surrogate ("\ud800") is valid JSON but no text: it would fail the whole batch it joins
            sentence.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise RequestRejected(422, f"sentence {i} is not valid Unicode text ({exc.reason} at character "
                                       f"{exc.start}); send UTF-8 text") from None
    k, targets = _nearest(data.get("nearest"), limits, languages)
    return EmbedRequest(tuple(sentences), lang, k, targets)


def _nearest(value: object, limits: ServeConfig, languages: list[str]) -> tuple[int, tuple[str, ...]]:
    """(k, languages) of the optional `nearest` field: {"k": 3, "in": ["en", "zh"]}."""
    if value is None:
        return 0, ()
    if not isinstance(value, dict) or set(value) - {"k", "in"}:
        raise RequestRejected(422, '"nearest" must be an object {"k": 3, "in": ["en"]}')
    k, targets = value.get("k", 3), value.get("in")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= limits.max_nearest_k:
        raise RequestRejected(422, f'"nearest.k" must be an integer from 1 to serve.max_nearest_k '
                                   f"({limits.max_nearest_k}), not {k!r}")
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
        raise RequestRejected(422, '"nearest.in" must be a non-empty list of languages, e.g. ["en"]')
    unknown = [t for t in targets if t not in languages]
    if unknown:
        raise RequestRejected(422, f'"nearest.in": the model knows {languages}, not {unknown}')
    return k, tuple(targets)
