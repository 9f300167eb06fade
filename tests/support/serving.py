"""Serving for the tests: HTTP calls that take an error status for an answer, and a registered champion."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from orchestration.adapters import registry, tracking
from orchestration.lifecycle import packaging

NAME = "served"


def post(url: str, body: bytes | dict, timeout: float = 60) -> tuple[int, dict]:
    """(status, JSON body) of a POST; HTTP errors are answers too."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        text = exc.read()
        try:
            return exc.code, json.loads(text)
        except json.JSONDecodeError:
            return exc.code, {"error": text.decode(errors="replace")}


def any_body(langs: list[str]):
    """A hypothesis strategy of request bodies (bytes) for /embed and /translate: random JSON values, most of
    them near the fields' names; well-formed requests whose sentences hold lone surrogates, some with a target
    and a beam; random bytes."""
    from hypothesis import strategies as st

    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    values = st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(
                st.sampled_from(["sentences", "lang", "nearest", "k", "in", "target", "beam", "x"])
                | st.text(max_size=5),
                inner,
                max_size=4,
            )
        ),
        max_leaves=20,
    )
    surrogates = st.text(alphabet=st.characters(categories=["Cs"]) | st.characters(), max_size=8)
    requests = st.fixed_dictionaries(
        {"sentences": st.lists(surrogates, max_size=3), "lang": st.sampled_from(langs)},
        optional={"target": st.sampled_from(langs) | st.text(max_size=3), "beam": st.integers(-2, 10)},
    )
    return (
        values.map(lambda v: json.dumps(v).encode())
        | requests.map(lambda v: json.dumps(v).encode())
        | st.binary(max_size=300)
    )


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {}
    except OSError:
        return 0, {}


def register(uri: str, model_dir: Path, embedder) -> str:
    """Log `model_dir` (with its loaded `SentenceEmbedder`) as the pyfunc model of a new run, register it as
    `NAME` and promote it; its version."""
    run = tracking.start_run(uri, "exp", "train", {})
    info = packaging.log_model(uri, run, model_dir, embedder.model.embedding_dim)
    version = registry.register_model(uri, info.model_uri, NAME, {})
    registry.promote(uri, NAME, version)
    return version
