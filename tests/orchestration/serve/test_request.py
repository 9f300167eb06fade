"""The request checks of `interlingua serve` and its swap, without Ray or HTTP."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import pytest

from orchestration.config.stages import ServeConfig
from orchestration.serve.models import ModelSlot, ServedModel
from orchestration.serve.request import (
    EmbedRequest,
    RequestRejected,
    TranslateRequest,
    check_length,
    parse_embed,
    parse_translate,
)
from tests.support.serving import any_body

LIMITS = ServeConfig(
    max_sentences=2,
    max_sentence_chars=40,
    max_body_bytes=200,
    max_nearest_k=5,
    max_nearest_hits=10,
    max_beam=4,
    max_decoded_rows=6,
)
DEEP = ServeConfig(max_body_bytes=100_000)  # room for a deeply nested body
LANGS = ["en", "fr"]
STORED = ["en", "fr"]  # the languages the stored embedding set can be searched in


def body(**fields) -> bytes:
    return json.dumps(fields).encode()


def test_a_good_request_is_parsed():
    got = parse_embed(
        body(sentences=["Dieu est amour.", ""], lang="fr", nearest={"k": 2, "in": ["en"]}), LIMITS, LANGS, stored=STORED
    )
    assert got == EmbedRequest(("Dieu est amour.", ""), "fr", 2, ("en",))
    assert parse_embed(body(sentences=[], lang="en"), LIMITS, LANGS, stored=None).nearest_k == 0


@pytest.mark.parametrize(
    "raw, status, words",
    [
        (b"x" * 201, 413, "serve.max_body_bytes"),
        (body(sentences=["a", "b", "c"], lang="en"), 413, "serve.max_sentences"),
        (b"\xff\xfe", 422, "not JSON"),
        (b"[1, 2]", 422, "JSON object"),
        (body(sentences=["a"], lang="en", extra=1), 422, "unknown field"),
        (body(sentences=[1], lang="en"), 422, "list of strings"),
        (body(sentences=["a"]), 422, "the model knows"),
        (body(sentences=["a" * 41], lang="en"), 422, "serve.max_sentence_chars"),
        (body(sentences=["\ufdfa" * 3], lang="en"), 422, "54 characters once NFKC-normalized"),
        (body(sentences=["a"], lang="en", nearest={"k": 6, "in": ["fr"]}), 422, "serve.max_nearest_k"),
        (body(sentences=["a"], lang="en", nearest={"k": True, "in": ["fr"]}), 422, "nearest.k"),
        (b'{"sentences": ["ok", "\\ud800"], "lang": "en"}', 422, "sentence 1 is not valid Unicode text"),
        (body(sentences=["a"], lang="en", nearest={"k": 1, "in": []}), 422, "nearest.in"),
        (body(sentences=["a"], lang="en", nearest={"k": 1, "in": ["de"]}), 422, "the model knows"),
        (body(sentences=["a"], lang="en", nearest={"k": 1, "in": ["fr", "en", "fr"]}), 422, "more than once"),
        (body(sentences=["a", "b"], lang="en", nearest={"k": 3, "in": ["en", "fr"]}), 413, "max_nearest_hits"),
    ],
)
def test_a_bad_request_is_refused_with_its_status_and_what_to_change(raw, status, words):
    with pytest.raises(RequestRejected, match=words) as caught:
        parse_embed(raw, LIMITS, LANGS, stored=STORED)
    assert caught.value.status == status


def test_a_good_translation_request_is_parsed():
    got = parse_translate(body(sentences=["Dieu est amour."], lang="fr", target="en", beam=4), LIMITS, LANGS)
    assert got == TranslateRequest(("Dieu est amour.",), "fr", "en", 4)
    assert parse_translate(body(sentences=["a", "b"], lang="en", target="en"), LIMITS, LANGS).beam == 1  # round trip


@pytest.mark.parametrize(
    "raw, status, words",
    [
        (b"x" * 201, 413, "serve.max_body_bytes"),
        (b"{", 422, '"target": "en"'),  # the example names the target
        (body(sentences=["a"], lang="fr", target="en", nearest={"k": 1}), 422, "sentences, lang, target and beam"),
        (body(sentences=["a", "b", "c"], lang="fr", target="en"), 413, "serve.max_sentences"),
        (body(sentences=["a"], lang="de", target="en"), 422, '"lang": the model knows'),
        (body(sentences=["a"], lang="fr"), 422, '"target": the model knows'),
        (body(sentences=["a"], lang="fr", target="de"), 422, "not 'de'"),
        (body(sentences=["a", " "], lang="fr", target="en"), 422, "sentence 1 is empty"),
        (body(sentences=["a" * 41], lang="fr", target="en"), 422, "serve.max_sentence_chars"),
        (body(sentences=["a"], lang="fr", target="en", beam=0), 422, "serve.max_beam"),
        (body(sentences=["a"], lang="fr", target="en", beam=5), 422, "serve.max_beam"),
        (body(sentences=["a"], lang="fr", target="en", beam=True), 422, '"beam" must be an integer'),
        (body(sentences=["a"], lang="fr", target="en", beam="2"), 422, '"beam" must be an integer'),
        (body(sentences=["a", "b"], lang="fr", target="en", beam=4), 413, "2 sentences x beam 4 = 8 rows"),
    ],
)
def test_a_bad_translation_request_is_refused_with_its_status_and_what_to_change(raw, status, words):
    with pytest.raises(RequestRejected, match=words) as caught:
        parse_translate(raw, LIMITS, LANGS)
    assert caught.value.status == status


def test_any_body_is_a_checked_translation_request_or_a_413_or_422():
    """As for /embed: never another exception than RequestRejected, whatever the body."""
    from hypothesis import given, settings

    @settings(max_examples=200, deadline=None)
    @given(any_body(LANGS))
    def check(raw):
        try:
            request = parse_translate(raw, DEEP, LANGS)
        except RequestRejected as exc:
            assert exc.status in (413, 422)
            return
        assert request.target in LANGS and 1 <= request.beam <= DEEP.max_beam
        assert len(request.sentences) * request.beam <= DEEP.max_decoded_rows
        for sentence in request.sentences:
            assert sentence.strip()
            sentence.encode("utf-8")

    check()


def test_nearest_in_a_language_the_stored_set_lacks_is_422_naming_it_and_those_it_holds():
    """The model knows German, the stored set (what `interlingua evaluate` embedded) holds English and French
    alone: refused before the request joins a batch, where searching it was a KeyError and a 500 for the batch."""
    raw = body(sentences=["Dieu est amour."], lang="fr", nearest={"k": 2, "in": ["en", "de"]})
    with pytest.raises(RequestRejected) as caught:
        parse_embed(raw, LIMITS, ["en", "fr", "de"], stored=["en", "fr"])
    assert caught.value.status == 422
    assert str(caught.value).startswith("\"nearest.in\": the stored embedding set holds ['en', 'fr'], not ['de']")
    with pytest.raises(RequestRejected, match="no stored embedding set") as caught:
        parse_embed(raw, LIMITS, ["en", "fr", "de"], stored=None)
    assert caught.value.status == 422
    assert parse_embed(raw, LIMITS, ["en", "fr", "de"], stored=["de", "en"]).nearest_in == ("en", "de")


def test_a_sentence_within_the_raw_limit_that_nfkc_expands_above_it_is_422_before_any_work():
    """U+FDFA (one character) is 18 once NFKC-normalized, as the model reads it: repeated to just under the raw
    limit it was 18 times the text the limit allows (24 s of a replica). Counted after normalization too, it is
    refused; expanded text within the limit, and text NFKC leaves alone, still pass."""
    import time
    import unicodedata

    limits = ServeConfig()  # the shipped limits: 2,000 characters a sentence
    limit = limits.max_sentence_chars
    assert len(unicodedata.normalize("NFKC", "\ufdfa")) == 18
    raw = body(sentences=["Dieu est amour.", "\ufdfa" * (limit - 1)], lang="fr")
    assert len(raw) < limits.max_body_bytes
    started = time.monotonic()
    with pytest.raises(RequestRejected) as caught:
        parse_embed(raw, limits, LANGS, stored=None)
    assert time.monotonic() - started < 1.0  # normalizing is C code: milliseconds, not the replica's 24 s
    assert caught.value.status == 422
    assert str(caught.value) == (
        f"sentence 1 has {18 * (limit - 1)} characters once NFKC-normalized (as the model "
        f"reads it; {limit - 1} as sent), above serve.max_sentence_chars ({limit}); cut it"
    )
    fits = "\ufdfa" * (limit // 18)
    got = parse_embed(body(sentences=[fits, "ﬁn"], lang="fr"), limits, LANGS, stored=None)
    assert got.sentences == (fits, "ﬁn")
    plain = "a" * limit
    assert parse_embed(body(sentences=[plain], lang="en"), limits, LANGS, stored=None).sentences == (plain,)


def test_a_request_asking_too_many_neighbours_is_refused_before_it_joins_a_batch():
    """Issue 71's probe (256 sentences, k 100, "fr" 100 times) held a replica for over a minute, as
    its cost grows with sentences x k x the languages of nearest.in: a repeated language is a 422, and the
    product above serve.max_nearest_hits a 413, each naming the field, from `parse_embed` (before any
    embedding); a request within the budget passes."""
    limits = ServeConfig()  # the shipped limits
    sentences = ["Dieu est amour."] * limits.max_sentences
    probe = body(sentences=sentences, lang="fr", nearest={"k": 100, "in": ["fr"] * 100})
    assert len(probe) < limits.max_body_bytes
    with pytest.raises(RequestRejected) as caught:
        parse_embed(probe, limits, LANGS, stored=STORED)
    assert (caught.value.status, str(caught.value)) == (
        422,
        "\"nearest.in\" names ['fr'] more than once; name each language once",
    )
    with pytest.raises(RequestRejected) as caught:
        parse_embed(
            body(sentences=sentences, lang="fr", nearest={"k": 100, "in": ["fr"]}), limits, LANGS, stored=STORED
        )
    assert (caught.value.status, str(caught.value)) == (
        413,
        f"{limits.max_sentences} sentences x nearest.k 100 x 1 in nearest.in = {limits.max_sentences * 100} "
        f"neighbours, above serve.max_nearest_hits ({limits.max_nearest_hits}); ask for fewer per request",
    )
    few = sentences[:10]
    k = limits.max_nearest_hits // (2 * len(few))  # the most neighbours two languages allow ten sentences
    fits = parse_embed(
        body(sentences=few, lang="fr", nearest={"k": k, "in": ["en", "fr"]}), limits, LANGS, stored=STORED
    )
    assert (fits.nearest_k, fits.nearest_in) == (k, ("en", "fr"))
    with pytest.raises(RequestRejected, match="max_nearest_hits"):
        parse_embed(
            body(sentences=few, lang="fr", nearest={"k": k + 1, "in": ["en", "fr"]}), limits, LANGS, stored=STORED
        )


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 5000 + b"]" * 5000,  # deeper than the parser's recursion
        b'{"sentences": ["a"], "lang": "en", "nearest": {"k": ' + b"9" * 5000 + b"}}",
    ],
)
def test_deep_nesting_and_a_huge_number_are_422_not_a_server_error(raw):
    with pytest.raises(RequestRejected, match="not JSON we accept") as caught:
        parse_embed(raw, DEEP, LANGS, stored=STORED)
    assert caught.value.status == 422


def test_any_body_is_a_checked_request_or_a_413_or_422():
    """Random JSON values (most of them near the fields' names), random text with lone surrogates, random
    bytes: `parse_embed` returns a request whose sentences are all UTF-8 text, or refuses with 413 or 422;
    never another exception, which the server would answer with a 500 for every request batched with it."""
    from hypothesis import given, settings

    @settings(max_examples=400, deadline=None)
    @given(any_body(LANGS))
    def check(raw):
        try:
            request = parse_embed(raw, DEEP, LANGS, stored=STORED)
        except RequestRejected as exc:
            assert exc.status in (413, 422)
            return
        for sentence in request.sentences:
            sentence.encode("utf-8")

    check()


def test_a_declared_length_above_the_limit_is_refused_before_reading():
    check_length("200", LIMITS)
    check_length(None, LIMITS)
    with pytest.raises(RequestRejected, match="201 bytes") as caught:
        check_length("201", LIMITS)
    assert caught.value.status == 413


def served(version: str, download: tempfile.TemporaryDirectory | None = None) -> ServedModel:
    model = ServedModel(version, embedder=None, folder=Path("."), download=download)
    model.idle.set()
    return model


def test_a_swap_switches_at_once_and_drops_the_old_model_once_its_requests_end():
    async def scenario() -> None:
        download = tempfile.TemporaryDirectory(prefix="interlingua-test-")
        slot = ModelSlot(served("1", download), drain_timeout_s=60)
        holding = slot.use()
        assert holding.__enter__().version == "1"  # a request in flight on version 1
        swap = asyncio.create_task(slot.swap(served("2")))
        await asyncio.sleep(0)  # let the swap start: it waits for the request, not the clock
        assert slot.current.version == "2" and not swap.done()
        with slot.use() as later:
            assert later.version == "2"
        assert Path(download.name).is_dir()  # still held
        holding.__exit__(None, None, None)
        await asyncio.wait_for(swap, 10)
        assert not Path(download.name).exists()

    asyncio.run(scenario())


def test_a_request_that_never_ends_does_not_hold_the_old_model_forever():
    async def scenario() -> None:
        download = tempfile.TemporaryDirectory(prefix="interlingua-test-")
        slot = ModelSlot(served("1", download), drain_timeout_s=0.01)
        slot.use().__enter__()
        await asyncio.wait_for(slot.swap(served("2")), 10)
        assert slot.current.version == "2" and not Path(download.name).exists()

    asyncio.run(scenario())


class FakeChampions:
    """The champion alias and its versions' compatibility tags, as `ModelSource` reads them from the registry."""

    def __init__(self) -> None:
        self.version, self.tags, self.loaded = "1", {}, []

    def current_version(self) -> str:
        return self.version

    def compatibility(self, version: str) -> str | None:
        return self.tags.get(version)

    def load(self, version: str) -> ServedModel:
        self.loaded.append(version)
        return served(version)


@pytest.mark.parametrize("tag", [None, "v3", "b" * 64])
def test_an_incompatible_champion_is_not_swapped_in_until_tagged_compatible_and_said_once(caplog, tag):
    """serve.swap=compatible: a version untagged, or tagged compatible with another version than the served
    one, is refused at every poll with one warning naming both versions; once tagged `v1` (or the served
    model's sha256), the next poll swaps it in."""
    import logging

    from orchestration.serve.models import poll_champion

    async def scenario() -> None:
        source, slot, warned = FakeChampions(), ModelSlot(served("1"), drain_timeout_s=1), set()
        slot.current.model_sha256 = "a" * 64
        source.version = "2"
        if tag is not None:
            source.tags["2"] = tag
        for _ in range(3):
            await poll_champion(source, slot, "compatible", warned)
        assert slot.current.version == "1" and source.loaded == []
        source.tags["2"] = "v1"
        await poll_champion(source, slot, "compatible", warned)
        assert slot.current.version == "2" and source.loaded == ["2"]

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(said) == 1, said
    assert "champion version 2 is not compatible with the served version 1" in said[0]
    assert "still serving version 1" in said[0] and "serve.swap=any" in said[0]


def test_a_champion_tagged_compatible_with_the_served_models_sha256_is_swapped_in():
    from orchestration.serve.models import swap_verdict

    current = served("1")
    current.model_sha256 = "a" * 64
    assert swap_verdict("compatible", current, "2", "a" * 64) == (True, "")
    assert swap_verdict("compatible", current, "2", "v1") == (True, "")
    assert swap_verdict("compatible", current, "2", "v2")[0] is False


def test_serve_swap_any_swaps_in_an_incompatible_champion_and_says_the_stored_vectors_are_stale(caplog):
    import logging

    from orchestration.serve.models import poll_champion

    async def scenario() -> None:
        source, slot = FakeChampions(), ModelSlot(served("1"), drain_timeout_s=1)
        slot.current.model_sha256 = "a" * 64
        source.version = "2"
        await poll_champion(source, slot, "any", set())
        assert slot.current.version == "2"

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    (said,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "not compatible with the served version 1" in said and "model aaaaaaaaaaaa" in said
    assert "embed the stored vectors again" in said


def test_serve_without_a_model_to_serve_is_one_line_and_exit_2(tmp_path, capsys):
    from orchestration.cli import main

    assert main(["serve", f"serve.model={tmp_path / 'nothing'}"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"interlingua serve: error: serve.model: {tmp_path / 'nothing'}: not a model directory "
        "(missing model.safetensors, "
        "spm.model, config.yaml); `interlingua train` writes one to <run_dir>/train/model"
    ]
    assert main(["serve", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", "registry.model_name=none"]) == 2
    err = capsys.readouterr().err
    assert "registered model 'none'" in err and "has no champion yet" in err and len(err.splitlines()) == 1


def test_embed_flushed_flushes_denormals_in_the_pool_thread_that_runs_it():
    """A replica embeds through `embed_flushed` in `asyncio.to_thread`'s threads, not the one its constructor set
    up: the flag is per thread, so the call sets it where it runs (a trained encoder's activations reach the
    denormal range)."""
    import threading

    import numpy as np
    import torch

    from orchestration.serve.batch import embed_flushed

    tiny = torch.full((1 << 12,), 1e-39)  # denormal in float32

    class Embedder:
        def embed(self, sentences, lang):
            return np.array([[(tiny * 1.0).count_nonzero().item()]] * len(sentences))

    results = {}

    def pool_thread() -> None:
        torch.set_flush_denormal(False)  # as a pool thread that nothing set up
        results["plain"] = Embedder().embed(["x"], "en")
        results["flushed"] = asyncio.run(asyncio.to_thread(embed_flushed, Embedder(), ["x", "y"], "en"))

    thread = threading.Thread(target=pool_thread)
    thread.start()
    thread.join()
    assert results["plain"].tolist() == [[len(tiny)]]
    assert results["flushed"].tolist() == [[0], [0]]
