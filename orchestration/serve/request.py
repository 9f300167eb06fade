"""What `interlingua serve` accepts: a JSON body checked against the `serve` limits before any work.

    POST /embed {"sentences": ["Dieu est amour."], "lang": "fr"}
    POST /embed {"sentences": ["Dieu est amour."], "lang": "fr", "nearest": {"k": 3, "in": ["en"]}}
    POST /translate {"sentences": ["Dieu est amour."], "lang": "fr", "target": "en", "beam": 4}

Plain functions, testable without Ray or HTTP: `parse_embed` and `parse_translate` turn the raw body into an
`EmbedRequest` or a `TranslateRequest`, or raise `RequestRejected` with the HTTP status and a message that
says what to change: 413 for a body, a batch or a cost above its limit (send less per request), 422 for what
no resend fixes as is (not JSON, a missing or mistyped field, a language the model does not know or its stored
set does not hold, or named twice, a sentence too long, a beam out of range). A request's cost is bounded here
too: its sentences' characters once normalized (`check_normalized_length`), the neighbours it asks for,
sentences x nearest.k x languages (`serve.max_nearest_hits`), each language once, and the rows it decodes,
sentences x beam (`serve.max_decoded_rows`).
Everything one request can get wrong is refused here, before it joins a batch: a batch is embedded as one, so
an error found there would have to be kept from the requests batched with it (serve/batch.py does, as the
second line).
"""

from __future__ import annotations

import json
import unicodedata
from collections import Counter
from collections.abc import Sequence
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


@dataclass(frozen=True)
class TranslateRequest:
    sentences: tuple[str, ...]
    lang: str
    target: str  # the language to decode into (the same as `lang`: the round trip)
    beam: int = 1  # 1: greedy


def check_length(declared: str | None, limits: ServeConfig) -> None:
    """413 when the Content-Length header already says the body is above `max_body_bytes`."""
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise RequestRejected(
            413,
            f"the body is {int(declared)} bytes, above serve.max_body_bytes "
            f"({limits.max_body_bytes}); send fewer sentences per request",
        )


def parse_embed(
    body: bytes, limits: ServeConfig, languages: list[str], *, stored: Sequence[str] | None
) -> EmbedRequest:
    """The checked request of a raw /embed body (see the module docstring); RequestRejected otherwise.
    `languages`: the model's; `stored`: those its stored embedding set can be searched in for "nearest"
    (`ServedModel.searchable`), None when it has no stored set."""
    data = _json_object(body, limits, EMBED_EXAMPLE, ("sentences", "lang", "nearest"))
    sentences, lang = _sentences(data, limits, languages)
    k, targets = _nearest(data.get("nearest"), limits, languages, stored)
    check_nearest_cost(len(sentences), k, targets, limits)
    return EmbedRequest(tuple(sentences), lang, k, targets)


def parse_translate(body: bytes, limits: ServeConfig, languages: list[str]) -> TranslateRequest:
    """The checked request of a raw /translate body (see the module docstring); RequestRejected otherwise.
    `languages`: the model's. Whether its decoder for the target was trained is the translator's to say
    (`SentenceTranslator.check_target`)."""
    data = _json_object(body, limits, TRANSLATE_EXAMPLE, ("sentences", "lang", "target", "beam"))
    sentences, lang = _sentences(data, limits, languages)
    for i, sentence in enumerate(sentences):
        if not sentence.strip():  # nothing to translate: its vector is the encoder's of no token
            raise RequestRejected(422, f"sentence {i} is empty; send sentences with text to translate")
    target = data.get("target")
    if not isinstance(target, str) or target not in languages:
        raise RequestRejected(422, f'"target": the model knows {languages}, not {target!r}')
    beam = data.get("beam", 1)
    if not isinstance(beam, int) or isinstance(beam, bool) or not 1 <= beam <= limits.max_beam:
        raise RequestRejected(
            422, f'"beam" must be an integer from 1 (greedy) to serve.max_beam ({limits.max_beam}), not {beam!r}'
        )
    rows = len(sentences) * beam
    if rows > limits.max_decoded_rows:
        raise RequestRejected(
            413,
            f"{len(sentences)} sentences x beam {beam} = {rows} rows to decode, above serve.max_decoded_rows "
            f"({limits.max_decoded_rows}); send fewer sentences per request, or a smaller beam",
        )
    return TranslateRequest(tuple(sentences), lang, target, beam)


EMBED_EXAMPLE = '{"sentences": ["..."], "lang": "fr"}'
TRANSLATE_EXAMPLE = '{"sentences": ["..."], "lang": "fr", "target": "en"}'


def _json_object(body: bytes, limits: ServeConfig, example: str, fields: Sequence[str]) -> dict:
    """The body as a JSON object of `fields` at most, within serve.max_body_bytes; RequestRejected otherwise."""
    if len(body) > limits.max_body_bytes:
        raise RequestRejected(
            413,
            f"the body is above serve.max_body_bytes ({limits.max_body_bytes} bytes); send fewer sentences per request",
        )
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, a huge number
        raise RequestRejected(422, f"the body is not JSON we accept ({str(exc)[:200]}); send {example}") from None
    if not isinstance(data, dict):
        raise RequestRejected(422, f"the body must be a JSON object: {example}")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise RequestRejected(
            422, f"unknown field(s) {unknown}; the fields are {', '.join(fields[:-1])} and {fields[-1]}"
        )
    return data


def _sentences(data: dict, limits: ServeConfig, languages: list[str]) -> tuple[list[str], str]:
    """The request's sentences and their language, each sentence checked against the limits."""
    sentences, lang = data.get("sentences"), data.get("lang")
    if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
        raise RequestRejected(422, '"sentences" must be a list of strings')
    if len(sentences) > limits.max_sentences:
        raise RequestRejected(
            413, f"{len(sentences)} sentences, above serve.max_sentences ({limits.max_sentences}); split the batch"
        )
    if not isinstance(lang, str) or lang not in languages:
        raise RequestRejected(422, f'"lang": the model knows {languages}, not {lang!r}')
    for i, sentence in enumerate(sentences):
        if len(sentence) > limits.max_sentence_chars:
            raise RequestRejected(
                422,
                f"sentence {i} has {len(sentence)} characters, above "
                f"serve.max_sentence_chars ({limits.max_sentence_chars}); cut it",
            )
        try:  # a lone surrogate ("\ud800") is valid JSON but no text: it would fail the whole batch it joins
            sentence.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise RequestRejected(
                422, f"sentence {i} is not valid Unicode text ({exc.reason} at character {exc.start}); send UTF-8 text"
            ) from None
        check_normalized_length(sentence, i, limits)
    return sentences, lang


def check_normalized_length(sentence: str, index: int, limits: ServeConfig) -> None:
    """422 when `sentence` is above `max_sentence_chars` once NFKC-normalized, as the model reads it
    (core.normalize): one character may expand 18-fold (U+FDFA), so a sentence within the raw limit could
    cost the replica 18 times what the limit allows. Normalizing costs far less than embedding (C code,
    linear in the expanded text, which the raw limit bounds). The lowercasing that follows can only double
    one character (U+0130), a bounded cost left unchecked."""
    if unicodedata.is_normalized("NFKC", sentence):  # most text: a quick check, no copy
        return
    chars = len(unicodedata.normalize("NFKC", sentence))
    if chars > limits.max_sentence_chars:
        raise RequestRejected(
            422,
            f"sentence {index} has {chars} characters once NFKC-normalized (as the model "
            f"reads it; {len(sentence)} as sent), above serve.max_sentence_chars "
            f"({limits.max_sentence_chars}); cut it",
        )


def _nearest(
    value: object, limits: ServeConfig, languages: list[str], stored: Sequence[str] | None
) -> tuple[int, tuple[str, ...]]:
    """(k, languages) of the optional `nearest` field: {"k": 3, "in": ["en", "zh"]}, each language one the
    model knows and its stored set holds."""
    if value is None:
        return 0, ()
    if not isinstance(value, dict) or set(value) - {"k", "in"}:
        raise RequestRejected(422, '"nearest" must be an object {"k": 3, "in": ["en"]}')
    k, targets = value.get("k", 3), value.get("in")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= limits.max_nearest_k:
        raise RequestRejected(
            422, f'"nearest.k" must be an integer from 1 to serve.max_nearest_k ({limits.max_nearest_k}), not {k!r}'
        )
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
        raise RequestRejected(422, '"nearest.in" must be a non-empty list of languages, e.g. ["en"]')
    repeated = sorted(t for t, n in Counter(targets).items() if n > 1)
    if repeated:  # each repeat would search the stored set again, for the same answer
        raise RequestRejected(422, f'"nearest.in" names {repeated} more than once; name each language once')
    unknown = [t for t in targets if t not in languages]
    if unknown:
        raise RequestRejected(422, f'"nearest.in": the model knows {languages}, not {unknown}')
    if stored is None:
        raise RequestRejected(422, no_stored_set_message())
    missing = [t for t in targets if t not in stored]
    if missing:
        raise RequestRejected(422, missing_stored_message(missing, stored))
    return k, tuple(targets)


def check_nearest_cost(sentences: int, k: int, targets: Sequence[str], limits: ServeConfig) -> None:
    """413 when the neighbours asked for, `sentences` x `k` x the languages of `targets`, are above
    `max_nearest_hits`: each is read from the stored set and sent back, so this bounds how long one request
    holds a replica (issue 71: 256 sentences, k 100, "fr" 100 times held one for over a minute)."""
    cost = sentences * k * len(targets)
    if cost > limits.max_nearest_hits:
        raise RequestRejected(
            413,
            f"{sentences} sentences x nearest.k {k} x {len(targets)} in nearest.in = {cost} neighbours, "
            f"above serve.max_nearest_hits ({limits.max_nearest_hits}); ask for fewer per request",
        )


def no_stored_set_message(version: str | None = None) -> str:
    """Why "nearest" cannot be answered by a model without a stored embedding set (`version`: which model)."""
    model = f"model version {version}" if version else "the served model"
    return f'{model} has no stored embedding set to search (`interlingua evaluate` writes it); ask without "nearest"'


def missing_stored_message(missing: Sequence[str], stored: Sequence[str]) -> str:
    """Why "nearest.in" languages the model knows cannot be searched: its stored set lacks them."""
    return (
        f'"nearest.in": the stored embedding set holds {list(stored)}, not {list(missing)}; '
        "ask for those (`interlingua evaluate` stores the languages of its split)"
    )
