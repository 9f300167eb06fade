"""A batch of /embed requests (serve/batch.py) without Ray: what a replica runs on each request (check_length,
parse_embed, answer_batch), over good and bad requests mixed. No refusal is a 500, and each request's answer in
a batch is the one it gets alone: a bad request never fails the good ones batched with it (issue 55: a
"nearest.in" language missing from the stored set failed 28 of 40 good requests)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import zlib
from pathlib import Path

import numpy as np
import pytest

from core.errors import UserError
from orchestration.config.stages import ServeConfig
from orchestration.embedding.embedder import UnknownLanguage
from orchestration.serve.batch import answer_batch
from orchestration.serve.models import ServedModel
from orchestration.serve.request import EmbedRequest, RequestRejected, check_length, parse_embed
from tests.support.embeddings import store_of
from tests.support.serving import any_body

LIMITS = ServeConfig(max_sentences=3, max_sentence_chars=80, max_body_bytes=800, max_nearest_k=3)
DIM = 8
POISON = "\u2620"  # a sentence holding it passes every check, and the stand-in model refuses it
STORED_TEXTS = {
    "en": [
        "In the beginning God created the heaven and the earth.",
        "And God said, Let there be light: and there was light.",
        "And God saw the light, that it was good.",
        "God is love.",
        "Jesus wept.",
    ],
    "fr": [
        "Au commencement, Dieu créa les cieux et la terre.",
        "Dieu dit: Que la lumière soit! Et la lumière fut.",
        "Dieu vit que la lumière était bonne.",
        "Dieu est amour.",
        "Jésus pleura.",
    ],
}


def vector(sentence: str, lang: str) -> np.ndarray:
    """A sentence's stand-in embedding (D,): its own and its language's alone, whatever it is batched with."""
    seed = zlib.crc32(f"{lang}\0{sentence}".encode("utf-8", "surrogatepass"))
    return np.random.default_rng(seed).normal(size=DIM).astype(np.float32)


class Refused(UserError, ValueError):
    """What the stand-in model raises for a sentence it cannot embed (as `UnknownLanguage` is for a language)."""


class Embedder:
    """A stand-in for `SentenceEmbedder`: `vector` of each sentence; `fault` raised for a sentence holding POISON."""

    def __init__(self, languages: list[str], fault: type[Exception] = Refused) -> None:
        self.languages, self.fault, self.calls = languages, fault, 0

    def embed(self, sentences, lang: str) -> np.ndarray:
        self.calls += 1
        if lang not in self.languages:
            raise UnknownLanguage(f"the model knows {self.languages}, not {lang!r}")
        if any(POISON in s for s in sentences):
            raise self.fault(f"cannot embed a sentence holding {POISON!r}")
        return np.array([vector(s, lang) for s in sentences], np.float32).reshape(len(sentences), DIM)


@pytest.fixture
def models(tmp_path) -> dict[str, ServedModel]:
    """The model checked against ("1": knows en, fr, de; its stored set holds en and fr alone) and what may
    answer the batch since: itself; "2", swapped in (no de, a stored set of en alone); "3", without a stored
    set; "1-gone", its stored set removed from disk since it was opened."""

    def stored(name: str, langs: list[str]):
        arrays = {lang: np.array([vector(t, lang) for t in STORED_TEXTS[lang]]) for lang in langs}
        return store_of(tmp_path / name, arrays, {lang: STORED_TEXTS[lang] for lang in langs}, [0, 2, 5])

    both = stored("en-fr", ["en", "fr"])
    return {
        "1": ServedModel("1", Embedder(["en", "fr", "de"]), Path("."), both),
        "2": ServedModel("2", Embedder(["en", "fr"]), Path("."), stored("en", ["en"])),
        "3": ServedModel("3", Embedder(["en", "fr", "de"]), Path("."), None),
        "1-gone": ServedModel(
            "1", Embedder(["en", "fr", "de"]), Path("."), dataclasses.replace(both, folder=tmp_path / "gone")
        ),
    }


def raw(value) -> bytes:
    return value if isinstance(value, bytes) else json.dumps(value).encode()


GOOD = [
    raw(b)
    for b in [
        {"sentences": ["In the beginning God created the heaven and the earth."], "lang": "en"},
        {
            "sentences": ["Au commencement, Dieu créa les cieux et la terre.", ""],
            "lang": "fr",
            "nearest": {"k": 2, "in": ["en"]},
        },
        {"sentences": ["Im Anfang schuf Gott Himmel und Erde."], "lang": "de", "nearest": {"k": 3, "in": ["en", "fr"]}},
        {"sentences": [], "lang": "en", "nearest": {"k": 1, "in": ["fr"]}},
        {"sentences": ["ﬁn", "\ufdfa" * 4], "lang": "fr"},  # NFKC expands them, within the limit
    ]
]
# every refusal of request.py, and what passes the checks but fails in the batch (POISON)
BAD = [
    raw(b)
    for b in [
        b"x" * 801,
        {"sentences": ["a", "b", "c", "d"], "lang": "en"},
        b"\xff\xfe",
        b"[1, 2]",
        {"sentences": ["a"], "lang": "en", "extra": 1},
        {"sentences": "God is love.", "lang": "en"},
        {"sentences": ["God is love."]},
        {"sentences": ["Dieu est amour."], "lang": "xx"},
        {"sentences": ["a" * 81], "lang": "en"},
        b'{"sentences": ["ok", "\\ud800"], "lang": "en"}',
        {"sentences": ["\ufdfa" * 5], "lang": "en"},  # 5 characters as sent, 90 once NFKC-normalized
        {"sentences": ["a"], "lang": "en", "nearest": ["fr"]},
        {"sentences": ["a"], "lang": "en", "nearest": {"k": 0, "in": ["fr"]}},
        {"sentences": ["a"], "lang": "en", "nearest": {"k": 4, "in": ["fr"]}},
        {"sentences": ["a"], "lang": "en", "nearest": {"k": True, "in": ["fr"]}},
        {"sentences": ["a"], "lang": "en", "nearest": {"k": 1, "in": []}},
        {"sentences": ["a"], "lang": "en", "nearest": {"k": 1, "in": "fr"}},
        {"sentences": ["a"], "lang": "en", "nearest": {"k": 1, "in": ["xx"]}},
        {"sentences": ["God is love."], "lang": "en", "nearest": {"k": 2, "in": ["de"]}},  # the model's, not stored
        {"sentences": ["God is love.", f"a {POISON} b"], "lang": "en"},
        {"sentences": [POISON], "lang": "de", "nearest": {"k": 1, "in": ["en"]}},
    ]
]


def checked(body: bytes, chunked: bool, model: ServedModel) -> EmbedRequest:
    """What the replica does before batching (app.EmbeddingServer.__call__): the declared length (none when
    `chunked`), then the body against the limits and the model that is current."""
    check_length(None if chunked else str(len(body)), LIMITS)
    return parse_embed(body, LIMITS, model.embedder.languages, stored=model.searchable)


def same(got, alone) -> None:
    """`got` (from a batch) is the answer `alone` (its request on its own); scores as computed by another batch
    of queries may differ in their last bits."""
    if isinstance(alone, RequestRejected):
        assert isinstance(got, RequestRejected), got
        assert (got.status, str(got)) == (alone.status, str(alone))
        return
    assert isinstance(got, dict), got
    assert got.keys() == alone.keys() and got["dim"] == alone["dim"]
    np.testing.assert_array_equal(got["embeddings"], alone["embeddings"])
    for row, row_alone in zip(got.get("nearest", []), alone.get("nearest", [])):
        assert row.keys() == row_alone.keys()
        for target, hits in row.items():
            assert [h["key"] for h in hits] == [h["key"] for h in row_alone[target]]
            np.testing.assert_allclose(
                [h["score"] for h in hits], [h["score"] for h in row_alone[target]], rtol=1e-5, atol=1e-6
            )


def test_good_and_bad_requests_mixed_in_batches_fail_no_good_one_and_are_never_a_500(models):
    """Requests drawn from the good ones, from every refusal of request.py and the batch, and from random
    bodies (tests.support.serving.any_body), checked against model 1 and batched together while model 1, or a
    model swapped in since, answers: every refusal is a 4xx (503 only for a stored set gone from disk), each
    request's answer is the one it gets alone, and with model 1 every good request is answered."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    first = models["1"]
    bodies = st.sampled_from(GOOD) | st.sampled_from(BAD) | any_body(first.embedder.languages)

    @settings(max_examples=150, deadline=None)
    @given(st.lists(st.tuples(bodies, st.booleans()), min_size=1, max_size=10), st.sampled_from(sorted(models)))
    def check(sent, answering):
        requests, sources = [], []
        for body, chunked in sent:
            try:
                requests.append(checked(body, chunked, first))
                sources.append(body)
            except RequestRejected as exc:
                assert exc.status in (413, 422), exc
        served = models[answering]
        results = asyncio.run(answer_batch(requests, served))
        assert len(results) == len(requests)
        for request, body, got in zip(requests, sources, results):
            same(got, asyncio.run(answer_batch([request], served))[0])
            if isinstance(got, RequestRejected):
                assert got.status in (422, 503), got
                assert got.status == 422 or (answering == "1-gone" and request.nearest_k), got
            else:
                expected = np.array([vector(s, request.lang) for s in request.sentences]).reshape(-1, DIM)
                np.testing.assert_array_equal(np.array(got["embeddings"]).reshape(-1, DIM), expected)
            if answering == "1" and body in GOOD:
                assert isinstance(got, dict), (body, got)

    check()


def test_a_stored_language_gone_since_the_check_fails_its_requests_alone(models):
    """The issue's batch: 40 good requests and a few whose "nearest.in" the stored set lacks. Checked against
    model 1, whose stored set holds French, they are answered by model 2, swapped in since, whose stored set
    does not (searching it was a KeyError, a 500 for the whole batch): 422 naming what it holds, the rest 200."""
    first = models["1"]
    good = [
        checked(raw({"sentences": [t], "lang": "en", "nearest": {"k": 1, "in": ["en"]}}), False, first)
        for t in STORED_TEXTS["en"] * 8
    ]
    bad = checked(
        raw({"sentences": ["Dieu est amour."], "lang": "fr", "nearest": {"k": 2, "in": ["fr"]}}), False, first
    )
    requests = good[:13] + [bad] + good[13:27] + [bad] + good[27:]
    results = asyncio.run(answer_batch(requests, models["2"]))
    refused = [r for r in results if isinstance(r, RequestRejected)]
    assert [(r.status, str(r)) for r in refused] == [
        (
            422,
            "\"nearest.in\": the stored embedding set holds ['en'], "
            "not ['fr']; ask for those (`interlingua evaluate` stores "
            "the languages of its split)",
        )
    ] * 2
    answered = [r for r in results if not isinstance(r, RequestRejected)]
    assert len(answered) == 40
    for request, answer in zip(good, answered):  # each finds itself, at cosine 1
        (row,) = answer["nearest"]
        assert row["en"][0]["text"] == request.sentences[0]
        assert row["en"][0]["score"] == pytest.approx(1.0, abs=1e-5)


def test_a_fault_on_one_request_is_its_own_500_and_the_others_are_answered(models):
    """A failure the replica cannot blame on the request (not a UserError) is a 500, of that request alone: its
    language's requests, embedded together first, are embedded one by one once that fails."""
    faulty = dataclasses.replace(models["1"], embedder=Embedder(["en", "fr", "de"], fault=RuntimeError))
    requests = [
        EmbedRequest(("God is love.",), "en"),
        EmbedRequest((f"a {POISON}",), "en"),
        EmbedRequest(("Dieu est amour.",), "fr"),
        EmbedRequest(("Jesus wept.",), "en"),
    ]
    results = asyncio.run(answer_batch(requests, faulty))
    assert isinstance(results[1], RequestRejected) and results[1].status == 500
    assert str(results[1]) == (
        "model version 1 failed on this request (RuntimeError); the requests batched with it were answered"
    )
    for i in (0, 2, 3):
        np.testing.assert_array_equal(results[i]["embeddings"], [vector(*requests[i].sentences, requests[i].lang)])
    assert faulty.embedder.calls == 1 + 1 + 3  # fr; en together, then each of the three alone


def test_the_searchable_languages_are_the_stored_ones_with_their_texts(models, tmp_path):
    assert models["1"].searchable == ["en", "fr"]
    assert models["2"].searchable == ["en"]
    assert models["3"].searchable is None
    vectors_only = dataclasses.replace(models["1"].store, columns=())  # `interlingua embed`'s: no texts
    assert dataclasses.replace(models["1"], store=vectors_only).searchable == []


@pytest.mark.beam  # a model over the session's prepared dataset's vocabulary
def test_a_translation_is_answered_as_its_translator_translates_and_a_fault_is_its_own_500(
    small_dataset, tmp_path, book_lines, monkeypatch
):
    """One /translate request (`answer_translation`), on a real (untrained) model directory whose file says its
    training taught the French decoder alone: the translator shares the served embedder's model and answers
    what `SentenceTranslator.translate` does; a target never taught is the request's 422; a fault while
    decoding is a 500 of its own that says the others were answered."""
    from orchestration.embedding.embedder import SentenceEmbedder
    from orchestration.embedding.translator import SentenceTranslator
    from orchestration.serve.batch import answer_translation
    from orchestration.serve.request import TranslateRequest
    from tests.support.runs import untrained_model_dir

    folder = untrained_model_dir(small_dataset, tmp_path / "model", decoders=["fr"])
    sentences = book_lines({"en": "k"}, [8])["en"][:3]  # Ruth 1:1-3
    served = ServedModel("1", SentenceEmbedder.load(folder), folder)
    got = asyncio.run(answer_translation(TranslateRequest(tuple(sentences), "en", "fr", 2), served))
    expected = SentenceTranslator.load(folder).translate(sentences, "en", "fr", beam=2)
    assert got == {"translations": expected, "lang": "en", "target": "fr", "beam": 2}
    assert served.translator.model is served.embedder.model  # one model in memory, not two
    refused = asyncio.run(answer_translation(TranslateRequest(tuple(sentences), "fr", "en"), served))
    assert isinstance(refused, RequestRejected) and refused.status == 422
    assert "decoder for 'en' was never trained" in str(refused) and "train.decoders_for" in str(refused), refused

    def broken(*args, **kwargs):
        raise RuntimeError("a fault of the replica")

    monkeypatch.setattr(served.translator, "translate", broken)
    failed = asyncio.run(answer_translation(TranslateRequest(tuple(sentences), "en", "fr"), served))
    assert isinstance(failed, RequestRejected) and failed.status == 500
    assert "failed on this request (RuntimeError); the requests beside it were answered" in str(failed), failed
