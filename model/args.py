"""What a model file's header holds beside the weights (`model.model_file.save_model`), torch-free: the driver builds
and checks the arguments before any worker imports torch.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ModelArgs(BaseModel):
    """The constructor arguments of `MultilingualNMT` (see there), as a model file's header holds them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    languages: list[str]
    vocab_size: int
    pooling: str = "max"
    embed_dim: int = 128
    encoder_hidden: int = 256
    encoder_layers: int = 1
    decoder_hidden: int = 256
    decoder_layers: int = 1
    dropout: float = 0.1
    shared_encoder: bool = False
    shared_decoder: bool = False
    output: str = "softmax"
    adaptive_cutoffs: list[int] = []
    ranking_scale: float = 20.0
    ranking_margin: float = 0.3
    nmt_weight: float = 1.0
    nmt_targets: list[str] | None = None  # the target languages the NMT loss decodes into; None: every target
    ranking_pairs: str = "source"
    distill_dim: int = 0
    distill_loss: str = "mse"


class ModelMeta(BaseModel):
    """What a model file records beside its arguments: the training step and dev error of its weights and the
    sha256 of the tokenizer it was trained with (None where unknown); any other value it was saved with is kept."""

    model_config = ConfigDict(extra="allow", frozen=True)

    step: int | None = None
    dev_error: float | None = None
    spm_sha256: str | None = None
    # the target languages whose decoder the training taught; None: a file written before it was recorded
    # (`trained_decoders`)
    decoders: list[str] | None = None


def trained_decoders(args: ModelArgs, meta: ModelMeta) -> list[str]:
    """The languages a model's file can decode into: what its training recorded (`ModelMeta.decoders`); for a
    file written before that, every language when its NMT loss was on, none when it was off."""
    if meta.decoders is not None:
        return list(meta.decoders)
    return list(args.languages) if args.nmt_weight > 0 else []
