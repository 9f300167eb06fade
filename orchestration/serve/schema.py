"""The HTTP API of `interlingua serve` as pydantic models: what /openapi.json and /docs describe.

They document; they do not check. /embed's body is checked by `serve.request.parse_embed` on the raw bytes
(a body read up to its size limit, then 413 or 422 with a message that says what to change), so that its
answers stay those of the limits; the answers are written by the routes as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from orchestration.config import JSONValue


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class NearestQuery(_Body):
    """The nearest stored sentences to return for each sentence (the model's stored embedding set)."""

    k: int = Field(
        3,
        ge=1,
        description="How many, at most serve.max_nearest_k; the sentences x k x the languages of `in` at most "
        "serve.max_nearest_hits.",
    )
    in_: list[str] = Field(
        alias="in", min_length=1, description="The languages of the stored set to search, each named once."
    )


class EmbedBody(_Body):
    """POST /embed: sentences of one language (at most serve.max_sentences, each at most
    serve.max_sentence_chars characters, the body at most serve.max_body_bytes)."""

    sentences: list[str] = Field(examples=[["Dieu est amour."]])
    lang: str = Field(description="A language the model knows.", examples=["fr"])
    nearest: NearestQuery | None = None


class TranslateBody(_Body):
    """POST /translate: sentences of one language, decoded into `target` through the interlingua (the source
    language's encoder makes each sentence's vector, the target's decoder its text). The sentences' limits are
    /embed's; their number x beam at most serve.max_decoded_rows."""

    sentences: list[str] = Field(examples=[["Dieu est amour."]], description="Each with text (not empty).")
    lang: str = Field(description="The sentences' language, one the model knows.", examples=["fr"])
    target: str = Field(
        description="The language to translate into: one whose decoder the model's training taught (the same "
        "as lang: the round trip).",
        examples=["en"],
    )
    beam: int = Field(1, ge=1, description="The beam's width, at most serve.max_beam; 1: greedy.")


class ModelIdentity(BaseModel):
    """The model that answered: its version (also in the X-Model-Version header), its identity, and the models
    whose stored vectors its own compare with. Vectors a client stored with model X compare with this answer's
    when X is `model_sha256` or in `compatible_with`; otherwise they are of another space."""

    model_version: str = Field(description="The registered version, or a model directory's sha256 prefix.")
    model_sha256: str = Field(description="The sha256 of its model.safetensors, as embed's manifest records it.")
    compatible_with: list[str] = Field(
        description="The model sha256s of older models whose stored vectors its own compare with (a "
        "`train.compatible_with` retrain the registry tagged compatible); empty otherwise."
    )


class TranslateResponse(ModelIdentity):
    """The translations, one per sentence in order, and the model that made them."""

    translations: list[str]
    lang: str
    target: str
    beam: int


class Neighbour(BaseModel):
    score: float = Field(description="The similarity of the stored sentence to the query.")
    key: str = Field(description="The stored tuple's key.")
    text: str


class EmbedResponse(ModelIdentity):
    """The embeddings, one row per sentence, and the model that computed them."""

    embeddings: list[list[float]] = Field(description="(N, dim) floats: one row per sentence, in order.")
    dim: int
    nearest: list[dict[str, list[Neighbour]]] | None = Field(
        None, description="Per sentence: language -> its nearest stored sentences, best first (when asked)."
    )


class ErrorResponse(BaseModel):
    """A refused or failed request: what to change, and the model version that was serving."""

    error: str
    model_version: str | None = None


class Health(BaseModel):
    status: str = "ok"


class Ready(ModelIdentity):
    ready: bool


ERRORS: dict[int | str, dict[str, type[BaseModel] | str]] = {
    408: {
        "model": ErrorResponse,
        "description": "The body did not arrive whole within serve.body_timeout_s, or arrived slowly while "
        "the replica or this client already had as many slow bodies as it may: send it at once.",
    },
    413: {
        "model": ErrorResponse,
        "description": "The body, the batch, the neighbours or the rows to decode asked for are above their "
        "limit: send less.",
    },
    422: {"model": ErrorResponse, "description": "Not a request the model can answer (the message says why)."},
    429: {
        "model": ErrorResponse,
        "description": "This client already has serve.max_slow_bodies_per_client bodies arriving slowly: "
        "send each body whole, at once.",
    },
    500: {"model": ErrorResponse, "description": "The model failed on this request (the others were answered)."},
    503: {
        "model": ErrorResponse,
        "description": "The stored embeddings cannot be read now, or (with Ray Serve's "
        "own plain-text body) its queue is full: try again.",
    },
}


def inline_schema(model: type[BaseModel]) -> dict[str, JSONValue]:
    """`model`'s JSON schema with its nested models written in place: a request body described through
    `openapi_extra` stands alone in the OpenAPI document, where `#/$defs/...` would point nowhere."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return resolve(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(value) for value in node]
        return node

    return resolve(schema)


def request_body(model: type[BaseModel]) -> dict[str, JSONValue]:
    """The `openapi_extra` of a route that reads its JSON body itself: `model` as its required request body."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": inline_schema(model)}}}}
