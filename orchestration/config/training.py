"""The sections of a training, below `prepare` (pipelines.config): what is learned (`model`, `train`) and how
it runs (`runtime`). Defaults live here and only here."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from core.schema import Schema


class PathConfig(Schema):
    """One training path (Schwenk & Douze, Table 3); a tuple's path is drawn by `weight`."""

    kind: Literal["1:1", "1:N", "M:1", "M:N"] = Field(
        description="1:1 one source to one target, 1:N one source to every other language of the tuple, M:1 "
        "m sources averaged to one target, M:N m averaged sources to every other language."
    )
    weight: float = Field(
        default=1.0,
        gt=0,
        description="Odds of a tuple being trained on this path, against the other paths that can serve it.",
    )
    sources: list[str] | None = Field(default=None, description="Allowed source languages; all when unset.")
    targets: list[str] | None = Field(default=None, description="Allowed targets, e.g. [en] for a fixed target.")
    m: int = Field(default=2, ge=2, description="Number of averaged sources of M:1 and M:N.")


class ModelConfig(Schema):
    """What is learned. The defaults are the recipe that learns in minutes on a CPU (the demo's,
    benchmarks/RESULTS.md): one BLSTM-max encoder shared by every language, its token embeddings
    initialized by cross-language LSI, trained by the ranking loss alone over every ordered language
    pair of a tuple. The paper's recipe (per-language modules, NMT loss only) is configs/paper.yaml."""

    encoder: Literal["blstm_max", "lstm_last", "bow_mean"] = Field(
        default="blstm_max",
        description="BLSTM + max-pool over time (the paper's best), LSTM last state, or the mean of the "
        "subword embeddings (a bag-of-subwords baseline).",
    )
    embed_dim: int = Field(default=128, gt=0, description="Token embedding size.")
    embed_init: Literal["random", "lsi"] = Field(
        default="lsi",
        description="Encoder token embeddings: random, or cross-language LSI of the training "
        "data (a truncated SVD of the token x tuple matrix, seconds; translations start close together).",
    )
    encoder_hidden: int = Field(default=128, gt=0, description="Per direction; the embedding is 2x for blstm_max.")
    encoder_layers: int = Field(default=1, ge=1, description="Stacked LSTM layers of the encoder.")
    decoder_hidden: int = Field(default=256, gt=0, description="LSTM state size of the NMT loss's decoder(s).")
    decoder_layers: int = Field(default=1, ge=1, description="Stacked LSTM layers of the NMT loss's decoder(s).")
    dropout: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="Dropout probability on the token embeddings, between LSTM layers and in the decoder; 0 = none.",
    )
    shared_encoder: bool = Field(default=True, description="One encoder for every language (LASER).")
    shared_decoder: bool = Field(default=False, description="One decoder told the target language (LASER).")
    output: Literal["softmax", "adaptive"] = Field(
        default="softmax", description="Full softmax, or torch's adaptive softmax (cheaper on CPU)."
    )
    adaptive_cutoffs: list[int] | None = Field(
        default=None, description="Frequency-rank cutoffs of the adaptive softmax; [V/16, V/4] when unset."
    )
    ranking_weight: float = Field(
        default=1.0, ge=0, description="Weight of the in-batch ranking loss on the embeddings; 0 = off."
    )
    ranking_scale: float = Field(
        default=20.0, gt=0, description="The ranking loss's softmax scale: the factor its cosines are multiplied by."
    )
    ranking_margin: float = Field(
        default=0.3,
        ge=0,
        description="The ranking loss's additive margin, taken off the cosine of each sentence's translation.",
    )
    nmt_weight: float = Field(default=0.0, ge=0, description="Weight of the NMT loss; 0 = ranking loss only.")
    nmt_targets: list[str] | None = Field(
        default=None,
        description="The languages the NMT loss decodes into, of each batch's targets (the others are ranked, not "
        "decoded): one decoder beside the ranking of every pair costs a fraction of five; every target when unset.",
    )
    ranking_pairs: Literal["source", "all"] = Field(
        default="all",
        description="Ranking loss between the (averaged) source and each target ('source'), or between "
        "every ordered pair of the batch's languages ('all': with a 1:N path, all L(L-1) pairs of a tuple).",
    )

    teacher: str | None = Field(
        default=None,
        description="A teacher to distil from: `use` (the offline multilingual USE, 16 languages) or "
        "a model directory of ours (local or a URI). Its embeddings of the training split are computed once and "
        "stored beside the dataset (<dataset_dir>/teacher/).",
    )
    distill_weight: float = Field(
        default=0.0,
        ge=0,
        description="Weight of the distillation loss (with a teacher): each source sentence's "
        "embedding, through a learned linear map where the sizes differ, regressed onto the teacher's embedding "
        "of it and of its tuple's pivot sentence.",
    )
    distill_loss: Literal["mse", "contrastive"] = Field(
        default="mse",
        description="How the mapped embedding meets the teacher's: `mse`, the squared difference "
        "(its mean over the teacher's dimensions: small beside the ranking loss), or `contrastive`, the ranking "
        "loss's additive-margin softmax of the student's sentence among the teacher's vectors of the batch.",
    )
    distill_languages: Literal["sources", "all"] = Field(
        default="sources",
        description="Whose sentences are distilled: the batch's `sources` (one language of a 1:N tuple), or `all` "
        "the languages the ranking loss encodes, each sentence and each of its translations (Reimers & Gurevych "
        "2020), with no extra encoder pass (the loss terms still cost steps).",
    )
    distill_source_weights: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict,
        description="A source's name (prepare.sources) -> the weight of its tuples' distillation terms, as a "
        "multiple of `distill_weight` (1 for a source not named): a teacher that is strong in one domain and weak "
        "in another can pull hard on the first and lightly on the second.",
    )
    distill_pivot: str = Field(
        default="en",
        description="The language whose sentence of a tuple every other is also regressed onto "
        "(the only target of a language the teacher lacks).",
    )

    @model_validator(mode="after")
    def _some_loss(self) -> ModelConfig:
        if self.nmt_weight == 0 and self.ranking_weight == 0:
            raise ValueError("nmt_weight and ranking_weight are both 0: nothing would be trained")
        if self.nmt_targets is not None and self.ranking_weight == 0:
            # a batch none of whose targets is decoded would have no loss at all
            raise ValueError(
                "nmt_targets ranks the batch's other targets, and ranking_weight is 0: a batch that decodes "
                "nothing would learn nothing; restrict train.paths' targets instead"
            )
        return self


class TrainConfig(Schema):
    """How it is learned; the defaults go with ModelConfig's: one 1:N path (a tuple's every language at
    once), small batches, a high peak learning rate after a short warmup, cosine decay."""

    paths: list[PathConfig] = Field(
        default_factory=lambda: [PathConfig(kind="1:N")],
        min_length=1,
        description="The training paths (which languages encode and which are targets); a batch holds one.",
    )
    monolingual: bool = Field(default=False, description="Allow auto-encoding paths (target = source).")
    languages: list[str] | None = Field(default=None, description="Train on these; all of the dataset's when unset.")
    max_tokens: int = Field(default=1500, gt=0, description="Batch budget: sentences x longest length.")
    window_tuples: int = Field(
        default=200_000,
        gt=0,
        description="Tuples a worker holds at once: its batches are planned (shuffled, "
        "length-bucketed) within windows of this many tuples (or one Parquet row group, if larger).",
    )
    source_weights: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict,
        description="A source's name (prepare.sources) -> how often each of its tuples is "
        "drawn per epoch, against 1 for the others: 0.25 a quarter of them (a different quarter each epoch), "
        "3 each three times; so a small book and many short messages can both shape the model.",
    )
    sample_tuples: int = Field(
        default=200_000,
        gt=0,
        description="Training tuples (the first, in shard order) that corpus "
        "statistics are computed from: the LSI initialization and the adaptive softmax's token order.",
    )
    max_steps: int = Field(
        default=20000, gt=0, description="Optimizer steps to train (or fewer, by max_minutes or early stopping)."
    )
    max_minutes: float | None = Field(default=None, gt=0, description="Stop after this much training time.")
    seed: int = Field(
        default=0, description="Seed of the initial weights, the LSI initialization and the batches' order and paths."
    )
    lr: float = Field(default=6e-3, gt=0, description="Peak learning rate (after warmup).")
    warmup_steps: int = Field(default=100, ge=0, description="Linear warmup from 0 to `lr` over these steps.")
    schedule: Literal["plateau", "cosine", "inverse_sqrt", "constant"] = Field(
        default="cosine",
        description="After warmup: decay by `lr_decay` when the dev error stalls; cosine to `min_lr` over "
        "the budget (the nearer of max_steps and max_minutes, so with a time budget it follows the clock); "
        "inverse square root of the step; or constant.",
    )
    weight_decay: float = Field(default=0.0, ge=0, description="Decoupled weight decay (AdamW); 0 = Adam.")
    grad_clip: float | None = Field(
        default=5.0, gt=0, description="Clip the gradients' total norm to this at every step; null: no clipping."
    )
    lr_decay: float = Field(default=0.5, gt=0, lt=1, description="LR factor when the dev error stalls.")
    lr_patience_evals: int = Field(
        default=1,
        ge=0,
        description="Dev evaluations without improvement the plateau schedule waits before decaying the LR.",
    )
    early_stop_patience_evals: int | None = Field(
        default=4, ge=1, description="Stop after this many dev evaluations without a better dev error; null: never."
    )
    min_lr: float = Field(default=1e-4, ge=0, description="The cosine schedule's final LR and the plateau's floor.")
    eval_every_steps: int = Field(
        default=200, gt=0, description="Steps between dev error measurements (best model, plateau, early stop)."
    )
    dev_max_sentences: int | None = Field(default=1000, gt=1, description="Dev tuples used for the error.")
    decoders_for: str | None = Field(
        default=None,
        description="A model directory (local or a URI): train only its decoders, its encoders frozen bit for "
        "bit, so that every vector it made stays valid and each decoder learns to decode its space. The "
        "architecture is the model's own (the other model.* keys of shape are not read); model.nmt_weight "
        "must be above 0, model.ranking_weight and model.distill_weight 0; the best checkpoint is the one of "
        "the lowest dev NLL (the dev similarity error cannot move).",
    )
    compatible_with: str | None = Field(
        default=None,
        description="A model directory of this product (local or a URI) whose space the new model keeps: its "
        "vectors of the training split are a fixed target of distillation (backward-compatible training, Shen "
        "et al. 2020), so that the new model's vectors search the old model's stored ones. It is the run's "
        "teacher (model.teacher unset, or the same); model.distill_weight must be above 0 and the new "
        "embedding size the old one's (no map between the spaces). The model's lineage records it.",
    )


class RuntimeConfig(Schema):
    """How a run executes: the cluster, workers, devices, fault tolerance, the cadence of logs and
    checkpoints. None of it changes what is learned or measured, so no fingerprint reads it: changing
    it never invalidates a dataset, a checkpoint or an evaluation."""

    ray_address: str | None = Field(default=None, description="An existing Ray cluster; a local one when unset.")
    ray_dashboard: bool = Field(
        default=False,
        description="Start Ray's dashboard (127.0.0.1:8265) with the local instance a command "
        "starts; a cluster's head decides for itself.",
    )
    worker_niceness: int = Field(
        # Ray's own default, 15, left a training next to any other work at niceness 0 a few percent of a
        # core; Linux lets an unprivileged user raise a niceness only, hence 0..19
        default=0,
        ge=0,
        le=19,
        description="Niceness of the workers of the local Ray instance a command "
        "starts, added to the command's own (0: as the command); a cluster joined at ray_address keeps its own.",
    )
    num_workers: int = Field(default=1, ge=1, description="Ray Train workers (DDP).")
    cpus_per_worker: int = Field(default=1, ge=1, description="Also the worker's torch threads.")
    use_gpu: bool = Field(default=False, description="A GPU per training worker and per embedding actor.")
    train_resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom Ray resources each training worker needs besides its CPUs "
        "(e.g. {trainer: 1} to keep training on the nodes started with that resource).",
    )
    max_failures: int = Field(default=3, ge=0, description="Worker-group restarts from the last checkpoint.")
    worker_env: dict[str, str] = Field(
        # Ray Train runs the loop in a thread of its worker actor; glibc gives such a
        # thread its own malloc arena, which it trims after every step: 1.8x the page
        # faults of the same loop in a main thread and ~15 % fewer tokens/s on CPU.
        # One arena that keeps what it freed removes that (benchmarks/train.py).
        default_factory=lambda: {
            "MALLOC_ARENA_MAX": "1",
            "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
            "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
            "MALLOC_TOP_PAD_": str(1 << 28),
        },
        description="Environment variables of every Ray Train worker process.",
    )
    prefetch_batches: int | None = Field(
        default=None,
        ge=0,
        description="Training batches a worker process builds ahead of the step "
        "(0: built in the step's own process); unset: 8 with use_gpu, else 0 (on a CPU it would take a core "
        "from the training threads).",
    )
    log_every_steps: int = Field(
        default=20,
        gt=0,
        description="Steps between the training metrics' logs (MLflow, progress line) and the time limit's checks.",
    )
    checkpoint_every_steps: int = Field(
        default=200, gt=0, description="Steps between checkpoints, which a restarted worker group resumes from."
    )
    keep_checkpoints: int = Field(
        default=2, ge=1, description="Checkpoints kept under <run_dir>/train/ray, the newest included."
    )
    lease_ttl_s: float = Field(
        default=60.0,
        ge=3,
        description="A run dir in a bucket is locked by a lease renewed every third of this; "
        "a lease not renewed this long is taken over by the next command (its holder paused or gone), and the "
        "old holder, should it wake, commits nothing more.",
    )
    embed_actors: int = Field(default=1, ge=1, description="Ray Data actors embedding in parallel.")
    cpus_per_task: int = Field(default=1, ge=1, description="CPUs of each embedding actor and search task.")
    backend: Literal["auto", "torch", "onnx", "onnx-int8"] = Field(
        # auto: an ONNX export runs only once `interlingua export` wrote it for this very model file, so the
        # default changes nothing until a user exports; then int8 is the fastest on a CPU (embedding.backends)
        default="auto",
        description="The encoder's engine: torch, onnx, onnx-int8, or auto (the fastest present).",
    )
