"""`interlingua serve` over HTTP on loopback: a real server process (a local Ray, MLflow in a sqlite store;
the package's `server` fixture, conftest.py), a real client. The embeddings, the limits, the 503s under
overload, and a champion swap under load. Slow clients and expensive requests: test_edge.py."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from core.dataset import file_sha256
from orchestration.adapters import model_dir as files
from orchestration.config import load_config
from tests.support.procs import wait_for
from tests.support.serving import any_body, get, post, register

pytestmark = pytest.mark.server


def test_health_and_readiness(server):
    assert get(f"{server['url']}/healthz") == (200, {"status": "ok"})
    status, body = get(f"{server['url']}/readyz")
    assert (status, body["ready"], body["model_version"]) == (200, True, "1")


def test_the_server_describes_its_api_at_openapi_json_and_docs(server):
    """Through Ray Serve's proxy: the FastAPI ingress's document and page (their content:
    serve/test_openapi.py), and an unknown route in the API's error form."""
    import urllib.request

    status, doc = get(f"{server['url']}/openapi.json")
    assert status == 200 and {"/embed", "/healthz", "/readyz"} <= set(doc["paths"]), doc
    assert "requestBody" in doc["paths"]["/embed"]["post"]
    with urllib.request.urlopen(f"{server['url']}/docs", timeout=10) as page:
        assert page.status == 200 and b"/openapi.json" in page.read()
    with urllib.request.urlopen(f"{server['url']}/docs/assets/swagger-ui-bundle.js", timeout=10) as script:
        assert script.status == 200 and len(script.read()) > 100_000  # Swagger UI from the endpoint, not a CDN
    status, body = post(f"{server['url']}/nowhere", {"sentences": [], "lang": "en"})
    assert status == 404 and body["error"].startswith("no route /nowhere"), body


def test_embeddings_are_the_in_process_embedders(server, verse):
    sentences = [verse("l", 8, 1, 1), verse("l", 8, 1, 2), ""]  # Ruth 1:1-2 in French, and an empty one
    status, body = post(f"{server['url']}/embed", {"sentences": sentences, "lang": "fr"})
    assert status == 200, body
    assert body["model_version"] == "1"
    expected = server["embedders"]["1"].embed(sentences, "fr")
    np.testing.assert_allclose(np.array(body["embeddings"]), expected, rtol=1e-5, atol=1e-6)
    assert body["dim"] == expected.shape[1]


def test_translations_are_the_in_process_translators_and_a_bad_request_fails_alone(server, verse):
    """POST /translate through the interlingua of version 1 (decoders taught for en and fr alone): the
    translator's own text, greedy and beam; a target never taught, a beam or a cost above its limit are each
    refused with what to change, while an /embed and a translation sent beside them are answered."""
    from orchestration.embedding.translator import SentenceTranslator

    url, limits = server["url"], server["limits"]
    translator = SentenceTranslator.load(server["first"])
    sentences = [verse("k", 8, 1, 1), verse("k", 8, 1, 2)]  # Ruth 1:1-2 in English
    for beam in (1, 3):
        status, body = post(f"{url}/translate", {"sentences": sentences, "lang": "en", "target": "fr", "beam": beam})
        assert status == 200, body
        assert body == {
            "translations": translator.translate(sentences, "en", "fr", beam=beam),
            "lang": "en",
            "target": "fr",
            "beam": beam,
            "model_version": "1",
            "model_sha256": file_sha256(server["first"] / files.MODEL_FILE),
            "compatible_with": [],
        }
    good = {"sentences": sentences, "lang": "en", "target": "en"}  # the round trip
    bad = [
        ({"sentences": sentences, "lang": "en", "target": "es"}, 422, "decoder for 'es' was never trained"),
        ({**good, "beam": limits.max_beam + 1}, 422, "serve.max_beam"),
        ({**good, "sentences": [sentences[0]] * 9, "beam": 8}, 413, "serve.max_decoded_rows"),
        ({**good, "sentences": [""]}, 422, "sentence 0 is empty"),
    ]
    with ThreadPoolExecutor(4) as pool:
        embedding = pool.submit(post, f"{url}/embed", {"sentences": sentences, "lang": "en"})
        beside = pool.submit(post, f"{url}/translate", good)
        answers = list(pool.map(lambda case: post(f"{url}/translate", case[0]), bad))
    for (_, status, words), (got, answer) in zip(bad, answers):
        assert got == status and words in answer["error"], answer
    assert embedding.result()[0] == 200
    status, body = beside.result()
    assert status == 200 and body["translations"] == translator.translate(sentences, "en", "en"), body


def test_nearest_sentences_of_the_stored_set(server, verse):
    """The stored test split holds the query itself: its nearest English sentence, at cosine 1."""
    from core.dataset import Dataset

    config = load_config(None, [f"dataset_dir={server['data_dir']}"])
    query = Dataset.open(config.data_dir).read("test", ["en_text"])["en_text"][0].as_py()
    status, body = post(
        f"{server['url']}/embed", {"sentences": [query], "lang": "en", "nearest": {"k": 2, "in": ["en", "fr"]}}
    )
    assert status == 200, body
    (found,) = body["nearest"]
    assert [len(found["en"]), len(found["fr"])] == [2, 2]
    assert found["en"][0]["text"] == query and found["en"][0]["score"] == pytest.approx(1.0, abs=1e-5)


def test_nearest_sentences_are_a_503_while_the_stored_set_is_gone_and_embeddings_still_answer(server, verse):
    body = {"sentences": [verse("k", 8, 1, 1)], "lang": "en", "nearest": {"k": 2, "in": ["fr"]}}
    away = server["stored"].with_name("moved-away")
    server["stored"].rename(away)
    try:
        status, answer = post(f"{server['url']}/embed", body)
        assert status == 503 and "stored embeddings of model version 1" in answer["error"], answer
        assert post(f"{server['url']}/embed", {"sentences": body["sentences"], "lang": "en"})[0] == 200
    finally:
        away.rename(server["stored"])
    assert post(f"{server['url']}/embed", body)[0] == 200  # back: served again, nothing to restart


@pytest.mark.parametrize(
    "body, status, words",
    [
        (b"x" * 9000, 413, "serve.max_body_bytes"),
        ({"sentences": ["In the beginning."] * 17, "lang": "en"}, 413, "serve.max_sentences"),
        (b"{not json", 422, "not JSON"),
        ({"sentences": ["Dieu est amour."], "lang": "xx"}, 422, "the model knows"),
        ({"sentences": ["In the beginning. " * 20], "lang": "en"}, 422, "serve.max_sentence_chars"),
        ({"sentences": ["\ufdfa" * 299], "lang": "en"}, 422, "5382 characters once NFKC-normalized"),  # 18-fold
        ({"sentences": "In the beginning.", "lang": "en"}, 422, "list of strings"),
        ({"sentences": ["In the beginning."], "lang": "en", "nearest": {"k": 0, "in": ["fr"]}}, 422, "nearest.k"),
    ],
)
def test_limits_are_answered_with_a_status_and_a_message(server, body, status, words):
    got, answer = post(f"{server['url']}/embed", body)
    assert got == status, answer
    assert words in answer["error"]


def test_any_body_is_200_413_or_422_and_fails_no_request_batched_with_it(server, verse):
    """Random bodies (tests.support.serving.any_body: random JSON, lone surrogates, random bytes), each sent
    beside a good request so that both may share a batch: the random one is answered 200, 413 or 422, never
    500, and the good one is always 200 with its embedding."""
    from hypothesis import HealthCheck, given, settings

    good = {"sentences": [verse("k", 8, 1, 1)], "lang": "en"}
    expected = np.asarray(server["embedders"]["1"].embed(good["sentences"], "en"))

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(any_body(["en", "fr"]))
    def check(raw):
        with ThreadPoolExecutor(2) as pool:
            odd, ok = pool.map(lambda b: post(f"{server['url']}/embed", b), [raw, good])
        assert odd[0] in (200, 413, 422), (raw[:200], odd)
        assert ok[0] == 200, ok
        np.testing.assert_allclose(ok[1]["embeddings"], expected, rtol=1e-4, atol=1e-5)

    check()


def test_nearest_in_a_language_the_stored_set_lacks_is_422_and_fails_no_request_batched_with_it(server, verse):
    """The stored set holds en and fr of the model's languages: "nearest.in" another one, sent among good
    requests (four at a time: a batch holds up to 4, and more would wait in the proxy's queue of 6, near its
    503), is a 422 naming it and the stored ones; every good request is answered (issue 55: a KeyError in the
    batch, which failed 28 of 40 good requests)."""
    missing = next(lang for lang in server["embedders"]["1"].languages if lang not in ("en", "fr"))
    good = {"sentences": [verse("k", 8, 1, 1)], "lang": "en", "nearest": {"k": 2, "in": ["en"]}}
    bad = {**good, "nearest": {"k": 2, "in": ["en", missing]}}
    bodies = [bad if i % 4 == 2 else good for i in range(16)]
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda b: post(f"{server['url']}/embed", b), bodies))
    for body, (status, answer) in zip(bodies, answers):
        if body is bad:
            assert status == 422, answer
            assert f"the stored embedding set holds ['en', 'fr'], not ['{missing}']" in answer["error"], answer
        else:
            assert status == 200 and len(answer["nearest"][0]["en"]) == 2, answer


def test_every_listener_of_the_server_is_on_loopback(server):
    """The command's processes (its local Ray, Serve's controller, proxy and replica) listen on the loopback
    address alone: the replica's own gRPC server too, which Ray Serve binds to every interface
    (app.bind_replica_grpc)."""
    import psutil

    from tests.support.procs import family

    tree = {p.pid for p in family(server["proc"].pid)}
    bound = [
        (c.pid, c.laddr)
        for c in psutil.net_connections(kind="inet")
        if c.pid in tree and c.laddr and (c.status == psutil.CONN_LISTEN or not c.raddr)
    ]
    names = {psutil.Process(pid).name() for pid, _ in bound}
    assert {"raylet", "ray::ProxyActor"} <= names and any("ServeReplica" in n for n in names), names
    assert all(address.ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1") for _, address in bound), bound


def test_an_overload_is_answered_with_503_and_the_server_recovers(server, verse):
    """More concurrent requests than max_ongoing_requests + max_queued_requests (10): the rest are 503 at
    once, nothing else fails. Waves are sent until one overloads the server (a deadline, not a sleep). The
    time a request may take and the deadline come from one request measured first, on this machine as
    loaded as it is: a slow machine is slower, not overloaded."""
    import time

    body = {"sentences": [verse("k", 8, 1, n) for n in range(1, 17)], "lang": "en"}
    start = time.monotonic()
    assert post(f"{server['url']}/embed", body)[0] == 200
    one = time.monotonic() - start
    timeout = max(60.0, 64 * one)  # a wave of 32: each request queued behind at most the whole wave, twice over
    seen: list[int] = []

    def wave() -> bool:
        with ThreadPoolExecutor(32) as pool:
            statuses = list(pool.map(lambda _: post(f"{server['url']}/embed", body, timeout=timeout), range(32)))
        seen.extend(status for status, _ in statuses)
        assert {status for status, _ in statuses} <= {200, 503}, statuses
        return any(status == 503 for status, _ in statuses)

    wait_for(wave, max(120.0, 10 * timeout), "a 503 under overload")
    assert 200 in seen
    assert post(f"{server['url']}/embed", body, timeout=timeout)[0] == 200


def test_a_new_champion_is_served_under_load_without_a_failed_request(server, verse):
    """Three clients send requests back to back while version 2 is registered and promoted. Untagged, it is not
    compatible with version 1 (serve.swap=compatible, the default): the replica says so once in its log and
    keeps serving version 1. Once the registry tags it compatible with v1 (as the champion gate does for a
    `train.compatible_with` retrain), the next poll swaps it in, and its answers name version 1's model as the
    one whose stored vectors they compare with. While the replica loads it, on the same CPUs, answers are
    slower and requests wait in the proxy's queue: the load stays within serve.max_queued_requests, as a
    deployment's must, so none is refused."""
    from mlflow.tracking import MlflowClient

    from orchestration.adapters.registry import COMPATIBLE_TAG
    from tests.support.serving import NAME

    sentence = verse("k", 8, 1, 1)
    per_client: list[list[tuple[int, str, list, dict]]] = [[], [], []]
    done = threading.Event()

    def client(answers: list) -> None:
        while not done.is_set():
            status, body = post(f"{server['url']}/embed", {"sentences": [sentence], "lang": "en"})
            identity = {key: body.get(key) for key in ("model_sha256", "compatible_with")}
            answers.append((status, body.get("model_version"), body.get("embeddings") or body.get("error"), identity))

    def answered() -> list:
        return [a for answers in per_client for a in list(answers)]

    refusal = "champion version 2 is not compatible with the served version 1"
    clients = [threading.Thread(target=client, args=(answers,)) for answers in per_client]
    for thread in clients:
        thread.start()
    try:
        assert register(server["uri"], server["second"], server["embedders"]["2"]) == "2"
        wait_for(lambda: refusal in server["log"].read_text(), 120, "the replica's refusal of version 2")
        seen = len(answered())
        wait_for(lambda: len(answered()) >= seen + 20, 120, "twenty answers after the refusal")  # 2+ polls
        assert {a[1] for a in answered()} == {"1"}
        MlflowClient(tracking_uri=server["uri"]).set_model_version_tag(NAME, "2", COMPATIBLE_TAG, "v1")
        wait_for(lambda: sum(a[1] == "2" for a in answered()) >= 10, 180, "ten answers of version 2")
    finally:
        done.set()
        for thread in clients:
            thread.join(timeout=120)
    assert server["log"].read_text().count(refusal) == 1  # said once, though refused at every poll
    answers = answered()
    failed = [a for a in answers if a[0] != 200]
    assert not failed, failed[:3]
    assert {version for _, version, _, _ in answers} == {"1", "2"}
    for client_answers in per_client:  # one replica: a client's requests, once switched, never go back
        versions = [version for _, version, _, _ in client_answers]
        assert versions == sorted(versions), versions
    first, second = (file_sha256(server[v] / files.MODEL_FILE) for v in ("first", "second"))
    identities = {version: identity for _, version, _, identity in answers}
    assert identities == {
        "1": {"model_sha256": first, "compatible_with": []},
        "2": {"model_sha256": second, "compatible_with": [first]},
    }
    status, body = post(
        f"{server['url']}/embed", {"sentences": [sentence], "lang": "en", "nearest": {"k": 2, "in": ["fr"]}}
    )
    assert (status, body["model_version"]) == (422, "2")  # the stored set is version 1's
    assert "no stored embedding set" in body["error"]
    for version in ("1", "2"):
        expected = server["embedders"][version].embed([sentence], "en")
        got = next(e for _, v, e, _ in answers if v == version)
        np.testing.assert_allclose(np.array(got), expected, rtol=1e-5, atol=1e-6)


def test_ctrl_c_exits_130_and_leaves_no_download_behind(server):
    """Last in this module, the package's last to use the server (pytest runs them in order): it stops the
    server. The champions the replica downloaded (versions 1 and 2) were in a folder of the command's, removed
    with it."""
    import signal

    server["proc"].send_signal(signal.SIGINT)
    assert server["proc"].wait(timeout=120) == 130
    assert [p.name for p in server["tmp"].iterdir() if p.name.startswith("interlingua-serve")] == []
