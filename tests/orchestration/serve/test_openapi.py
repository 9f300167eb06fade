"""The HTTP API describes itself: the FastAPI ingress of `interlingua serve` answers /openapi.json and /docs,
the document lists the routes with their request and response schemas, and the documented request body is
what `parse_embed` accepts. In process, without Ray (the replica's own routes are not called)."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from orchestration.config.stages import ServeConfig
from orchestration.serve.app import api
from orchestration.serve.request import RequestRejected, parse_embed, parse_translate
from orchestration.serve.schema import EmbedBody, TranslateBody
from tests.support.serving import any_body

IDENTITY = {"model_version", "model_sha256", "compatible_with"}  # of the model that answered, in every answer


def call(method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request to the ASGI app `api`."""
    sent: list[dict] = []
    requested = False

    async def receive() -> dict:
        # the request once, then a disconnect once the response is whole (a streamed file listens for it)
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        while not any(m["type"] == "http.response.body" and not m.get("more_body") for m in sent):
            await asyncio.sleep(0.01)
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
    }
    asyncio.run(api(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def schema_of(doc: dict, node: dict) -> dict:
    """`node`, or the component its $ref names (which must exist)."""
    if "$ref" not in node:
        return node
    prefix = "#/components/schemas/"
    assert node["$ref"].startswith(prefix), node
    return doc["components"]["schemas"][node["$ref"][len(prefix) :]]


def test_the_openapi_document_lists_the_routes_and_their_request_and_response_schemas():
    status, headers, raw = call("GET", "/openapi.json")
    assert status == 200 and headers["content-type"] == "application/json"
    doc = json.loads(raw)
    assert {path: sorted(ops) for path, ops in doc["paths"].items()} == {
        "/embed": ["post"],
        "/translate": ["post"],
        "/healthz": ["get"],
        "/readyz": ["get"],
    }
    assert "#/$defs/" not in raw.decode()  # every reference resolves inside the document

    embed = doc["paths"]["/embed"]["post"]
    request = embed["requestBody"]["content"]["application/json"]["schema"]
    assert embed["requestBody"]["required"] and set(request["properties"]) == {"sentences", "lang", "nearest"}
    assert sorted(request["required"]) == ["lang", "sentences"] and request["additionalProperties"] is False
    nearest = next(s for s in request["properties"]["nearest"]["anyOf"] if s.get("type") == "object")
    assert set(nearest["properties"]) == {"k", "in"} and nearest["required"] == ["in"]

    def response(op: dict, code: str) -> dict:
        return schema_of(doc, op["responses"][code]["content"]["application/json"]["schema"])

    answer = response(embed, "200")
    assert set(answer["properties"]) == {"embeddings", "dim", "nearest", *IDENTITY}
    assert answer["properties"]["embeddings"]["items"] == {"items": {"type": "number"}, "type": "array"}
    for code in ("408", "413", "422", "429", "500", "503"):
        assert set(response(embed, code)["properties"]) == {"error", "model_version"}, code
    translate = doc["paths"]["/translate"]["post"]
    request = translate["requestBody"]["content"]["application/json"]["schema"]
    assert set(request["properties"]) == {"sentences", "lang", "target", "beam"}
    assert sorted(request["required"]) == ["lang", "sentences", "target"] and request["additionalProperties"] is False
    assert set(response(translate, "200")["properties"]) == {"translations", "lang", "target", "beam", *IDENTITY}
    for code in ("408", "413", "422", "429", "500"):
        assert set(response(translate, code)["properties"]) == {"error", "model_version"}, code
    assert set(response(doc["paths"]["/readyz"]["get"], "200")["properties"]) == {"ready", *IDENTITY}
    assert set(response(doc["paths"]["/healthz"]["get"], "200")["properties"]) == {"status"}


def test_the_docs_page_is_served_with_its_scripts_from_the_endpoint_itself():
    """No CDN: the page renders where the endpoint has no network beyond its clients."""
    status, headers, raw = call("GET", "/docs")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b"/openapi.json" in raw and b"https://" not in raw, raw
    for asset in re.findall(rb'(?:src|href)="(/docs/assets/[^"]+)"', raw):
        status, headers, body = call("GET", asset.decode())
        assert status == 200 and len(body) > 500, asset
    assert len(re.findall(rb'(?:src|href)="/docs/assets/', raw)) == 3  # the script, the styles, the icon


def test_an_unknown_route_or_method_is_answered_in_the_apis_error_form():
    status, _, raw = call("GET", "/nowhere")
    assert status == 404 and json.loads(raw) == {
        "error": "no route /nowhere; POST /embed, /translate, GET /healthz, /readyz, /docs"
    }
    status, headers, raw = call("GET", "/embed")
    assert status == 405 and "GET is not allowed on /embed" in json.loads(raw)["error"]
    assert headers["allow"] == "POST"


PARSERS = {  # each route's parser, its documented body and a body the server takes
    "embed": (
        lambda raw, limits: parse_embed(raw, limits, ["en", "fr"], stored=["en", "fr"]),
        EmbedBody,
        {"sentences": ["Dieu est amour."], "lang": "fr", "nearest": {"k": 2, "in": ["en"]}},
    ),
    "translate": (
        lambda raw, limits: parse_translate(raw, limits, ["en", "fr"]),
        TranslateBody,
        {"sentences": ["Dieu est amour."], "lang": "fr", "target": "en"},
    ),
}


@pytest.mark.parametrize("route", sorted(PARSERS))
def test_every_body_the_parser_accepts_is_one_the_documented_schema_accepts(route):
    """The document does not promise less than the server takes (the server checks more: its limits, the
    model's languages)."""
    from hypothesis import given, settings

    parse, schema, example = PARSERS[route]
    limits = ServeConfig(max_body_bytes=100_000)
    accepted = []

    @settings(max_examples=300, deadline=None)
    @given(any_body(["en", "fr"]))
    def check(raw):
        try:
            parse(raw, limits)
        except RequestRejected:
            return
        schema.model_validate_json(raw)
        accepted.append(raw)

    check()
    schema.model_validate_json(json.dumps(example))
    assert accepted  # the strategy reached bodies the server takes
