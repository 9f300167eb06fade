"""`train.decoders_for`: a trained model whose decoders alone are trained, its encoders frozen bit for bit (as
SONAR trains a decoder on a fixed space): every vector the model made stays valid, and each decoder learns to
decode that space. The cheap path to `translate` for a model trained by ranking and distillation alone.

    frozen = resolve(config, data, languages)      # None without train.decoders_for; checked before any work
    args = frozen.args                             # the model's own architecture (`WorkerJob.model_args`)
    model.load_state_dict(load(frozen).state_dict()); model.freeze_encoders()    # on each worker
"""

from __future__ import annotations

from dataclasses import dataclass

from core.dataset import Dataset
from core.location import Location
from model.args import ModelArgs, trained_decoders
from orchestration.adapters import model_dir as model_files
from orchestration.config import Config, ConfigError

KEY = "train.decoders_for"


@dataclass(frozen=True)
class FrozenModel:
    location: str  # the model directory, a resolved local path or a URI: each worker fetches it
    model_sha256: str  # of its model.safetensors: in the run's fingerprint
    args: ModelArgs  # its own, with this run's model.nmt_weight
    decoders: list[str]  # the languages whose decoder its training taught before


def resolve(config: Config, data: Dataset, languages: list[str]) -> FrozenModel | None:
    """The model of `train.decoders_for`, None without one. ConfigError (exit 2) before any work when the run
    would train anything but decoders, when the dataset's tokenizer is not the model's, or when the languages
    trained are not the model's."""
    given = config.train.decoders_for
    if given is None:
        return None
    m = config.model
    if m.nmt_weight <= 0 or m.ranking_weight > 0 or (m.teacher and m.distill_weight > 0):
        raise ConfigError(
            f"{KEY}: only the decoders learn, from the NMT loss alone: set model.nmt_weight above 0 and "
            f"model.ranking_weight and model.distill_weight to 0 (now {m.nmt_weight}, {m.ranking_weight}, "
            f"{m.distill_weight if m.teacher else 0})"
        )
    from model.model_file import read_header

    local = model_files.fetch(given)
    verified = model_files.verify(local)  # the sha256 of its model.safetensors and spm.model, checked
    args, header = read_header(str(local / model_files.MODEL_FILE))  # readable: `verify` read it
    ours = verified["spm_sha256"]
    dataset = data.spm_sha256 or Location.of(data.spm_model).sha256()  # the manifest's, else the file's
    if ours != dataset:
        raise ConfigError(
            f"{KEY}: {given} was trained with another tokenizer (spm.model sha256 {ours[:12]}) than the dataset's "
            f"({dataset[:12]}): its decoders would learn other token ids; prepare the data with the model's "
            "spm.model, or train a model on this dataset"
        )
    if list(languages) != list(args.languages):
        raise ConfigError(
            f"{KEY}: the run trains {languages}, the model knows {args.languages}: set train.languages to "
            f"{args.languages} (in that order)"
        )
    if args.vocab_size != data.vocab_size:
        raise ConfigError(f"{KEY}: the model's vocabulary ({args.vocab_size}) is not the dataset's ({data.vocab_size})")
    return FrozenModel(
        Location.of(given, KEY).identity,  # a local path resolved (the workers run elsewhere), a URI as given
        verified["model_sha256"],
        args.model_copy(update={"nmt_weight": m.nmt_weight}),
        trained_decoders(args, header),
    )


def load(frozen: FrozenModel):
    """The frozen model's weights, on a worker (fetched into its host's cache when in a store), as a model."""
    local = model_files.fetch(frozen.location)
    model, _ = model_files.load(local / model_files.MODEL_FILE)
    return model
