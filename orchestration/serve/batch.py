"""A batch of /embed requests answered by one model, each request's failure kept to itself; a /translate
request answered alone. No Ray here: the deployment (serve/app.py) calls `answer_batch` from its `@serve.batch`
method, where an exception would fail every request of the batch (Ray Serve sets the one exception on all of
their futures), and `answer_translation` from its /translate route.

    results = await answer_batch(requests, served)   # per request: its answer (a dict) or its RequestRejected
    result = await answer_translation(request, served)

Requests are checked before they join a batch (serve/request.py), so what fails here is a race (a swap, since
the check, to a model without the language or the stored set asked for), the stored set gone from disk (503),
or a fault. The requests of one language are embedded together; when that fails, each is embedded alone, so
that only the one that fails gets the error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, NotRequired, TypedDict

import numpy as np

from core.errors import UserError
from orchestration.serve.models import ServedModel
from orchestration.serve.request import (
    EmbedRequest,
    RequestRejected,
    TranslateRequest,
    missing_stored_message,
    no_stored_set_message,
)

log = logging.getLogger(f"ray.serve.{__name__}")  # Ray Serve shows its replicas' "ray.serve" loggers


class Hit(TypedDict):
    """A stored sentence near a query (`schema.Neighbour`)."""

    score: float
    key: str
    text: str


class Answer(TypedDict):
    """The body of a request's answer, without the model version (`schema.EmbedResponse`)."""

    embeddings: list[list[float]]  # (N, D)
    dim: int
    nearest: NotRequired[list[dict[str, list[Hit]]]]  # per sentence: language -> its hits, best first


Result = Answer | RequestRejected


async def answer_batch(requests: Sequence[EmbedRequest], served: ServedModel) -> list[Result]:
    """Each request's answer or its RequestRejected, in the order of `requests`; never raises for one request's
    sake. The embedding and the search run in threads: the replica's loop keeps reading bodies meanwhile."""
    results: list[Result | None] = [None] * len(requests)
    for lang in sorted({r.lang for r in requests}):
        members = [i for i, r in enumerate(requests) if r.lang == lang]
        embedded = await _embed_group([requests[i] for i in members], lang, served)
        for i, vectors in zip(members, embedded):
            if isinstance(vectors, RequestRejected):
                results[i] = vectors
                continue
            try:
                results[i] = await _answer(requests[i], vectors, served)
            except Exception as exc:  # noqa: BLE001 - this request's fault or a bug: its answer, not the batch's
                results[i] = refusal(exc, served)
    return results  # type: ignore[return-value]  # each request is of one language, each language answered


async def _embed_group(group: list[EmbedRequest], lang: str, served: ServedModel) -> list[np.ndarray | RequestRejected]:
    """The (n_i, D) embeddings of each request of `group` (all in `lang`), or its RequestRejected."""
    if lang not in served.embedder.languages:  # a swap to a model without it, since the check
        return [
            RequestRejected(422, f'"lang": the model knows {served.embedder.languages}, not {lang!r}') for _ in group
        ]
    try:
        vectors = await asyncio.to_thread(
            embed_flushed, served.embedder, [s for r in group for s in r.sentences], lang
        )  # (N, D)
    except Exception as exc:  # noqa: BLE001 - kept to the request that caused it
        if len(group) == 1:
            return [refusal(exc, served)]
        log.warning(
            "model version %s: a batch of %d %s requests failed (%s); embedding each alone",
            served.version,
            len(group),
            lang,
            type(exc).__name__,
        )
        return [(await _embed_group([request], lang, served))[0] for request in group]
    ends = np.cumsum([len(r.sentences) for r in group])
    return list(np.split(vectors, ends[:-1]))


async def _answer(request: EmbedRequest, vectors: np.ndarray, served: ServedModel) -> Result:
    """The answer of one request from its (n, D) embeddings: with its nearest stored sentences if asked."""
    answer: Answer = {"embeddings": vectors.tolist(), "dim": int(vectors.shape[1])}
    if not request.nearest_k:
        return answer
    searchable = served.searchable
    if searchable is None:  # a swap to a model without a stored set, since the check
        return RequestRejected(422, no_stored_set_message(served.version))
    missing = [t for t in request.nearest_in if t not in searchable]
    if missing:  # likewise: its stored set lacks them (searching would be a KeyError)
        return RequestRejected(422, missing_stored_message(missing, searchable))
    from orchestration.embed.search import search_stored

    answer["nearest"] = [{} for _ in request.sentences]
    for target in request.nearest_in:
        try:
            hits = await asyncio.to_thread(search_stored, served.store, vectors, target, request.nearest_k)
        except (OSError, ValueError) as exc:  # its folder removed or damaged since it was opened
            log.warning("model version %s: its stored embeddings cannot be read: %s", served.version, exc)
            return RequestRejected(
                503,
                f"the stored embeddings of model version {served.version} cannot be "
                f'read now ({type(exc).__name__}); ask without "nearest", or again '
                "once `interlingua evaluate` has written them again",
            )
        for row, found in zip(answer["nearest"], hits):
            row[target] = [{"score": s, "key": key, "text": text} for s, key, text in found]
    return answer


class Translation(TypedDict):
    """The body of a /translate answer, without the model version (`schema.TranslateResponse`)."""

    translations: list[str]
    lang: str
    target: str
    beam: int


async def answer_translation(request: TranslateRequest, served: ServedModel) -> Translation | RequestRejected:
    """The translations of one /translate request, or its RequestRejected: 422 for a target whose decoder the
    model's training never taught (or a language a swap since the check took away), 500 for a fault. The
    decoding runs in a thread: the replica's loop keeps reading bodies and embedding meanwhile. The caller lets
    one translation run at a time (`EmbeddingServer.decoding`), which also makes the translator once."""
    try:
        translator = await asyncio.to_thread(served.translation)
        translator.check_source(request.lang, flag='"lang"')
        translator.check_target(request.target, flag='"target"')
        texts = await asyncio.to_thread(
            translate_flushed, translator, list(request.sentences), request.lang, request.target, request.beam
        )
    except Exception as exc:  # noqa: BLE001 - this request's fault or a bug: its answer alone
        return refusal(exc, served, beside="the requests beside it were answered")
    return {"translations": texts, "lang": request.lang, "target": request.target, "beam": request.beam}


def translate_flushed(translator: Any, sentences: list[str], source: str, target: str, beam: int) -> list[str]:
    """`translator.translate` with denormal floats flushed to zero in the calling thread (`embed_flushed`)."""
    import torch

    torch.set_flush_denormal(True)
    return translator.translate(sentences, source, target, beam=beam)


def refusal(
    exc: Exception, served: ServedModel, *, beside: str = "the requests batched with it were answered"
) -> RequestRejected:
    """The answer of one request that failed: 422 for what it asked of the model (a UserError, e.g. a language
    it does not know), else a 500 of its own, logged with its traceback (a fault of the replica, not of the
    request, as far as can be told); `beside` says what became of the other requests."""
    if isinstance(exc, RequestRejected):
        return exc
    if isinstance(exc, UserError):
        return RequestRejected(422, str(exc))
    log.error("model version %s failed on a request: %r", served.version, exc, exc_info=exc)
    return RequestRejected(
        500,
        f"model version {served.version} failed on this request ({type(exc).__name__}); {beside}",
    )


def embed_flushed(embedder: Any, sentences: list[str], lang: str) -> np.ndarray:
    """`embedder.embed` with denormal floats flushed to zero in the calling thread, one of `asyncio.to_thread`'s
    pool: the flag is per thread (`model.training.cpu_threads`), and a trained encoder's activations reach the
    denormal range (the multidomain recipe's model embedded 1.08x as fast with it, benchmarks/RESULTS.md)."""
    import torch

    torch.set_flush_denormal(True)
    return embedder.embed(sentences, lang)
